"""firebreak's warm interpreter (docs/supervisor.md, "Warm pool").

The supervisor starts this file with the job's own Python, under a shim,
before it needs a rank: it imports torch and the modules in PREIMPORT, says 'R' on its control socket, and waits.  Told a rank
(argv, environment, output file descriptor), it becomes that rank as a
fresh `python [-u] SCRIPT ARGS` or `python [-u] -m MODULE ARGS` would: the
environment replaced, sys.argv and sys.path[0] set, output to the rank's
log, firebreak's hooks armed when asked for, then the script run as
__main__.  The control socket arrives as fd 1 (the shim's stdout); the
warm-up's own output goes to fd 2, the slot's log.  It exits when the
socket closes (the supervisor is done with it, or gone) and when its
grandparent is not the supervisor (it was orphaned before it started).

Nothing of firebreak is imported before the rank's environment is in
place: the hooks attach to the rank's segment from that environment.
"""
import os
import socket
import struct
import sys
import time

_MAX = 1 << 20

# What a DDP script's start pulls in: DDP's construction alone imports
# torch._dynamo (and sympy with it), about 900 modules, 2-5 s.
PREIMPORT = ("torch.distributed", "torch.nn", "torch.optim", "torch.nn.parallel",
             "torch.utils.data", "torch._dynamo",
             "torch.distributed.algorithms.ddp_comm_hooks.default_hooks")


def _recv_exact(sock, n):
    b = bytearray()
    while len(b) < n:
        chunk = sock.recv(n - len(b))
        if not chunk:
            return None
        b += chunk
    return bytes(b)


def _parent_is_supervisor():
    want = os.environ.get("FIREBREAK_SUPERVISOR_PID", "")
    try:
        with open("/proc/%d/stat" % os.getppid()) as f:
            stat = f.read()
        shim_parent = stat[stat.rindex(")") + 2:].split()[1]
    except (OSError, ValueError, IndexError):
        return False
    return want != "" and shim_parent == want


def _wait_for_rank(ctl):
    """(argv, env, fd) from the supervisor, or None when it closed."""
    try:
        hdr, fds, _, _ = socket.recv_fds(ctl, 8, 1)
    except OSError:
        return None
    if len(hdr) < 8 or hdr[:4] != b"FBW1" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        return None
    (n,) = struct.unpack("<I", hdr[4:8])
    if n < 2 or n > _MAX:
        return None
    data = _recv_exact(ctl, n)
    if data is None or data[-2:] != b"\0\0":
        return None
    argv_part, _, env_part = data[:-1].partition(b"\0\0")
    argv = [os.fsdecode(a) for a in argv_part.split(b"\0")]
    env = {}
    for kv in env_part.rstrip(b"\0").split(b"\0"):
        k, eq, v = kv.partition(b"=")
        if eq and k:
            env[os.fsdecode(k)] = os.fsdecode(v)
    return argv, env, fds[0]


def main():
    t0 = time.monotonic()
    ctl = socket.socket(fileno=os.dup(1))
    os.dup2(2, 1)
    if not _parent_is_supervisor():
        sys.exit(0)
    import importlib
    import torch
    for name in PREIMPORT:
        try:
            importlib.import_module(name)
        except Exception:  # a module this torch does not have (1.13: no dynamo)
            pass
    sys.stderr.write("firebreak warm interpreter: pid %d, torch %s imported in %.2f s\n"
                     % (os.getpid(), torch.__version__, time.monotonic() - t0))
    sys.stderr.flush()
    try:
        ctl.sendall(b"R")
    except OSError:
        sys.exit(0)
    got = _wait_for_rank(ctl)
    if got is None:
        sys.exit(0)
    argv, env, fd = got
    sys.stderr.write("firebreak warm interpreter: pid %d became rank %s of attempt %s\n"
                     % (os.getpid(), env.get("RANK", "?"),
                        env.get("TORCHELASTIC_RESTART_COUNT", "?")))
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # The control socket stays open (close-on-exec) until this process
    # ends: the supervisor has let go of its end already.
    os.environ.clear()
    os.environ.update(env)
    i = 1
    if i < len(argv) and argv[i] == "-u":
        i += 1
        sys.stdout.reconfigure(write_through=True)
        sys.stderr.reconfigure(write_through=True)
    elif env.get("PYTHONUNBUFFERED"):
        sys.stdout.reconfigure(write_through=True)
    if env.get("FIREBREAK_PYTHON_HOOKS") == "1":
        try:
            from firebreak import _hooks
            _hooks.arm()
        except Exception as e:  # as the sitecustomize: never the program's problem
            sys.stderr.write("firebreak: Python hooks not loaded: %s: %s\n"
                             % (type(e).__name__, e))
    import runpy
    if argv[i] == "-m":
        sys.argv = [argv[i + 1]] + argv[i + 2:]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[i + 1], run_name="__main__", alter_sys=True)
    else:
        script = argv[i]
        sys.argv = argv[i:]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        # As a fresh interpreter since 3.9: __main__.__file__ absolute,
        # the working directory joined as is (not normalized), sys.argv[0]
        # as given (a script that chdir()s and then opens a file beside
        # __file__ failed in a warm-served attempt only).
        path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
        _run_script(path, runpy)


def _run_script(path, runpy):
    """As `python path`: a new __main__ whose __file__ is path, sys.argv as
    set (runpy.run_path sets sys.argv[0] to its argument for the run).  A
    directory or a zip file (a __main__.py inside) goes through runpy."""
    import zipfile
    if os.path.isdir(path) or zipfile.is_zipfile(path):
        runpy.run_path(path, run_name="__main__")
        return
    import builtins
    import importlib.machinery
    import io
    import types
    mod = types.ModuleType("__main__")
    mod.__dict__.update(__file__=path, __cached__=None, __builtins__=builtins,
                        __loader__=importlib.machinery.SourceFileLoader("__main__", path))
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    sys.modules["__main__"] = mod
    exec(code, mod.__dict__)


if __name__ == "__main__":
    main()
