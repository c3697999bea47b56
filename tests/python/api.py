"""The firebreak Python package without the supervisor: save and restore,
lazily created optimizer state, and bad input (each raises, naming the
tensor, and leaves the state and the checkpoints as they were).
Run: PYTHONPATH=<build>/python /usr/bin/python3 api.py [CASE...]"""
import contextlib
import io
import os
import shutil
import sys
import tempfile
import time

try:
    import torch
except ImportError:
    print("SKIP: this python has no torch")
    sys.exit(77)

import firebreak

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL: %s" % what, file=sys.stderr)


def raises(exc, words, fn):
    """fn() raises exc whose message has every one of words."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        check(all(w in msg for w in words), "message %r lacks %s" % (msg, words))
        return
    except BaseException as e:
        check(False, "expected %s, got %r" % (exc.__name__, e))
        return
    check(False, "expected %s %s, nothing raised" % (exc.__name__, words))


@contextlib.contextmanager
def stderr_caught():
    """sys.stderr into a StringIO and the process's fd 2 into a file, for
    the block: got["py"] and got["fd"] hold what each received."""
    got = {"py": "", "fd": ""}
    sys.stderr.flush()
    saved_py, saved_fd, buf = sys.stderr, os.dup(2), io.StringIO()
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        sys.stderr = buf
        try:
            yield got
        finally:
            sys.stderr = saved_py
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            f.seek(0)
            got["py"], got["fd"] = buf.getvalue(), f.read().decode(errors="replace")


def make(seed=0, hidden=8):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(),
                            torch.nn.Linear(hidden, 2))
    o = torch.optim.AdamW(m.parameters(), lr=1e-2)
    s = torch.optim.lr_scheduler.StepLR(o, 3, gamma=0.5)
    return m, o, s


def train(m, o, s, n):
    for _ in range(n):
        m(torch.randn(5, 4)).pow(2).sum().backward()
        o.step()
        s.step()
        o.zero_grad()


def same_optim(a, b):
    a, b = a.state_dict(), b.state_dict()
    if a["param_groups"] != b["param_groups"] or a["state"].keys() != b["state"].keys():
        return False
    return all(sa.keys() == b["state"][k].keys() and
               all(torch.equal(v, b["state"][k][n]) for n, v in sa.items())
               for k, sa in a["state"].items())


def snapshot(m):
    return [t.clone() for t in m.state_dict().values()]


def case_unattached():
    check(not firebreak.attached(), "attached without a supervisor")
    firebreak.step(1)
    firebreak.heartbeat()
    with firebreak.phase("eval"):
        pass
    raises(ValueError, ["phase 'nope'"], lambda: firebreak.phase("nope").__enter__())
    # step() takes the integers save() takes, names itself when it
    # refuses, and leaves the hooks' step as it was (a refused step set it)
    firebreak.step(torch.tensor(7))
    check(firebreak._last_step == 7, "step(torch.tensor(7)): %r" % firebreak._last_step)
    raises(ValueError, ["step -1: expected 0 <= step"], lambda: firebreak.step(-1))
    raises(TypeError, ["step: expected an int, got str 'x'"], lambda: firebreak.step("x"))
    raises(TypeError, ["step: expected an int, got bool"], lambda: firebreak.step(True))
    check(firebreak._last_step == 7, "a refused step kept: %r" % firebreak._last_step)
    raises(TypeError, ["step: expected an int, got str"], lambda: firebreak.committed("x"))
    ck = firebreak.Checkpointer({"w": torch.zeros(3)})   # default ./checkpoints
    check(os.path.realpath(ck.dir) == os.path.realpath("checkpoints"),
          "default dir %s" % ck.dir)
    check(ck.restore() is None, "restore with no checkpoint")
    ck.save(1)
    ck.close()
    check(os.path.exists("checkpoints/step-0000000001/rank-00000.safetensors"),
          "no shard in ./checkpoints")


def case_roundtrip_lazy_state():
    m, o, s = make()
    ck = firebreak.Checkpointer({"model": m, "optim": o, "sched": s},
                                extra={"pos": 0}, dir="ck")
    ck.save(0)                   # before the first step: no exp_avg yet
    train(m, o, s, 4)            # AdamW's state appears: a new plan
    ck.extra["pos"] = 40
    ck.save(4)
    want_rng = torch.get_rng_state()
    want = snapshot(m)
    want_sched = s.state_dict()
    ck.close()
    m2, o2, s2 = make(seed=1)
    torch.manual_seed(99)
    ck2 = firebreak.Checkpointer({"model": m2, "optim": o2, "sched": s2}, dir="ck")
    check(ck2.restore() == 4, "restored step")
    check(all(torch.equal(a, b) for a, b in zip(want, snapshot(m2))), "weights")
    check(same_optim(o, o2), "optimizer state")
    check(s2.state_dict() == want_sched, "scheduler state")
    check(ck2.extra == {"pos": 40}, "extra %r" % ck2.extra)
    check(torch.equal(torch.get_rng_state(), want_rng), "torch RNG state")
    train(m2, o2, s2, 1)         # and training goes on, saving again
    ck2.save(5)
    ck2.close()
    raises(ValueError, ["closed"], lambda: ck2.save(6))
    raises(ValueError, ["closed"], ck2.restore)
    raises(ValueError, ["closed"], ck2.wait)


def case_bad_dtype():
    ck = firebreak.Checkpointer({"a": torch.zeros(2, dtype=torch.complex128)}, dir="ck")
    raises(TypeError, ["tensor a", "complex128", "expected"], lambda: ck.save(1))
    ck.close()
    check(not os.path.exists("ck/step-0000000001"), "a checkpoint was written")


def case_non_contiguous():
    t = torch.zeros(4, 3).t()
    ck = firebreak.Checkpointer({"a": t}, dir="ck")
    raises(ValueError, ["tensor a", "not contiguous", "expected a contiguous"],
           lambda: ck.save(1))
    ck.close()
    check(not os.path.exists("ck/step-0000000001"), "a checkpoint was written")


def case_keys_changed():
    m, o, s = make()
    ck = firebreak.Checkpointer({"model": m}, dir="ck")
    ck.save(1)
    ck.close()
    m2 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                             torch.nn.Linear(8, 2), torch.nn.Linear(2, 2))
    before = snapshot(m2)
    ck2 = firebreak.Checkpointer({"model": m2}, dir="ck")
    raises(ValueError, ["tensor model/3.weight", "keys changed"], ck2.restore)
    check(all(torch.equal(a, b) for a, b in zip(before, snapshot(m2))),
          "the model changed though restore failed")
    ck3 = firebreak.Checkpointer({"net": m2}, dir="ck")
    raises(ValueError, ["holds state ['model']", "['net']"], ck3.restore)


def case_other_shape():
    m, o, s = make(hidden=8)
    ck = firebreak.Checkpointer({"model": m, "optim": o}, dir="ck")
    train(m, o, s, 1)
    ck.save(1)
    ck.close()
    m2, o2, s2 = make(hidden=16)
    before = snapshot(m2)
    ck2 = firebreak.Checkpointer({"model": m2, "optim": o2}, dir="ck")
    raises(ValueError, ["tensor model/0.weight", "(16, 4)", "(8, 4)"], ck2.restore)
    check(all(torch.equal(a, b) for a, b in zip(before, snapshot(m2))),
          "the model changed though restore failed")
    check(len(o2.state) == 0, "the optimizer changed though restore failed")


def case_bad_extra():
    class Mine:
        pass
    ck = firebreak.Checkpointer({"a": torch.zeros(2)}, extra={"x": Mine()}, dir="ck")
    raises(TypeError, ["cannot be checkpointed", "Mine"], lambda: ck.save(1))
    ck.close()
    check(not os.path.exists("ck/step-0000000001"), "a checkpoint was written")


def case_error_text():
    """firebreak.Error reads as its message (a traceback showed the tuple
    "(-20, '...')"); args stay (rc, message) and e.code is rc.  The
    engine's own words are the message, and are not also written to the
    process's stderr (one error, one message)."""
    open("afile", "w").close()
    try:
        with stderr_caught() as got:
            firebreak.Checkpointer({"t": torch.zeros(2)}, dir="afile")
        check(False, "a checkpointer into a file raised nothing")
    except firebreak.Error as e:
        # (a relative dir is made absolute: the message names the path)
        want = "mkdir %s: Not a directory (-20)" % os.path.join(os.getcwd(), "afile")
        check(str(e) == want, "str: %r" % str(e))
        check(e.code == -20 and e.args == (e.code, str(e)), "code/args: %r" % (e.args,))
        check(not str(e).startswith("("), "str is the tuple: %r" % str(e))
    check(got["fd"] == "" and got["py"] == "", "written besides the error: %r" % (got,))
    os.unlink("afile")
    check(str(firebreak.Error("plain")) == "plain", "one-argument Error")


def case_bad_state():
    raises(TypeError, ["state['x']", "state_dict"],
           lambda: firebreak.Checkpointer({"x": 3}, dir="ck"))
    raises(TypeError, ["non-empty dict"], lambda: firebreak.Checkpointer([], dir="ck"))
    # the directory given first, as dcp.save's checkpoint_id or a path-first API
    raises(TypeError, ["got a path, 'ck'", "dir='ck'"],
           lambda: firebreak.Checkpointer("ck", {"x": torch.zeros(2)}))


def case_save_waits():
    """A save while the previous one persists waits for it (test hook)."""
    if os.environ.get("FB_TEST_HOOKS") != "ON":
        print("skip save_waits: no FB_TEST_HOOKS")
        return
    os.environ["FIREBREAK_CKPT_WRITE_DELAY_MS"] = "400"
    try:
        t = torch.zeros(1000)
        ck = firebreak.Checkpointer({"t": t}, dir="ck")
        ck.save(1)
        t0 = time.monotonic()
        ck.save(2)
        waited = time.monotonic() - t0
        ck.close()
    finally:
        del os.environ["FIREBREAK_CKPT_WRITE_DELAY_MS"]
    check(waited > 0.2, "second save returned after %.3fs, did not wait" % waited)
    check(os.path.exists("ck/step-0000000002/rank-00000.safetensors"), "step 2")


def case_save_fails():
    """A failed write (disk full, test hook) raises firebreak.Error from
    wait(); the older checkpoint stays restorable."""
    if os.environ.get("FB_TEST_HOOKS") != "ON":
        print("skip save_fails: no FB_TEST_HOOKS")
        return
    t = torch.arange(8.0)
    ck = firebreak.Checkpointer({"t": t}, dir="ck")
    ck.save(1)
    ck.wait()
    os.environ["FIREBREAK_CKPT_FAIL"] = "ENOSPC@2"
    try:
        t.add_(1)
        ck.save(2)
        try:
            ck.wait()
            check(False, "wait after a failed save raised nothing")
        except firebreak.Error as e:
            # the engine's words for it, said on its writer's stderr, are
            # the error's too
            check(e.args[0] == -28 and e.args[1].startswith("checkpoint step 2 (rank 0) "
                  "failed: ") and "No space" in e.args[1]
                  and "older checkpoints are intact" in e.args[1],
                  "failed save: %r" % (e.args,))
    finally:
        del os.environ["FIREBREAK_CKPT_FAIL"]
    ck.close()
    u = torch.zeros(8)
    ck2 = firebreak.Checkpointer({"t": u}, dir="ck")
    check(ck2.restore() == 1 and torch.equal(u, torch.arange(8.0)), "step 1 restored")
    ck2.close()


def case_corrupt_fallback():
    """A corrupt newest shard: restore falls back to the older checkpoint,
    even when the older one holds fewer tensors (no optimizer state yet)."""
    m, o, s = make()
    ck = firebreak.Checkpointer({"model": m, "optim": o}, dir="ck", keep=3)
    ck.save(1)
    want = snapshot(m)
    train(m, o, s, 2)
    ck.save(2)
    ck.close()
    path = "ck/step-0000000002/rank-00000.safetensors"
    with open(path, "r+b") as f:
        f.seek(-3, os.SEEK_END)
        b = f.read(1)
        f.seek(-3, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xff]))
    m2, o2, s2 = make(seed=5)
    ck2 = firebreak.Checkpointer({"model": m2, "optim": o2}, dir="ck")
    with stderr_caught() as got:
        step = ck2.restore()
    check(step == 1, "did not fall back to step 1")
    # why, on sys.stderr (a notebook's, a logger's), not fd 2: the damage
    # found, though the package's first try (every tensor) failed
    check("firebreak: rank 0: not restoring checkpoint step 2: %s/ck/step-0000000002/"
          "rank-00000.safetensors: tensor" % os.getcwd() in got["py"]
          and "(data corrupted)" in got["py"]
          and "firebreak" not in got["fd"], "the fallback's words: %r" % (got,))
    check(all(torch.equal(a, b) for a, b in zip(want, snapshot(m2))), "weights")
    check(len(o2.state) == 0, "optimizer state from the corrupt step")


def case_extension_input():
    """The extension itself checks what the glue hands it."""
    from firebreak import _firebreak as fb
    c = fb.Ckpt("ck")
    t = torch.zeros(4)
    raises(ValueError, ["tensor w", "8 bytes given", "make 16"],
           lambda: c.register("w", fb.DTYPE_F32, (4,), t.data_ptr(), 8, t))
    raises(ValueError, ["tensor w", "dtype 99"],
           lambda: c.register("w", 99, (4,), t.data_ptr(), 16, t))
    raises(ValueError, ["tensor w", "dimension 0 is -1"],
           lambda: c.register("w", fb.DTYPE_F32, (-1,), t.data_ptr(), 16, t))
    raises(ValueError, ["tensor w", "null address"],
           lambda: c.register("w", fb.DTYPE_F32, (4,), 0, 16, t))
    raises(ValueError, ["tensor w", "33 dimensions"],
           lambda: c.register("w", fb.DTYPE_F32, (1,) * 33, t.data_ptr(), 4, t))
    c.register("w", fb.DTYPE_F32, (4,), t.data_ptr(), 16, t)
    try:
        c.register("w", fb.DTYPE_F32, (4,), t.data_ptr(), 16, t)
        check(False, "a duplicate name was accepted")
    except fb.Error as e:
        check(e.args == (-22, 'tensor "w" is already registered (-22)'),
              "duplicate name: %r" % (e.args,))
    raises(ValueError, ["phase 9"], lambda: fb.set_phase(9))
    raises(ValueError, ["rank 2 of world size 1"], lambda: fb.layout("ck", 2, 1))
    check(c.save(3) is True, "save")
    c.close()
    c.close()
    raises(ValueError, ["closed"], lambda: c.save(4))
    raises(ValueError, ["closed"], lambda: c.dir)
    check(fb.layout("ck", 0, 1) == (3, [("w", fb.DTYPE_F32, (4,))]),
          "layout %r" % (fb.layout("ck", 0, 1),))
    check(fb.layout("nowhere", 0, 1) is None, "layout of a missing directory")
    # the reader across shards
    check(fb.open_layout("nowhere") is None, "open_layout of a missing directory")
    lay = fb.open_layout("ck", 0)
    check(lay.step == 3 and lay.world_size == 1, "layout %d %d" % (lay.step, lay.world_size))
    check(lay.tensors() == [("w", 0, fb.DTYPE_F32, (4,), (4,), (0,))],
          "tensors %r" % (lay.tensors(),))
    u = torch.ones(4)
    raises(TypeError, ["a request is"], lambda: lay.read([("w", -1)]))
    raises(ValueError, ["tensor w", "8 bytes given", "make 16"],
           lambda: lay.read([("w", -1, fb.DTYPE_F32, (4,), (4,), (0,), u.data_ptr(), 8)]))
    raises(ValueError, ["tensor w", "1 dimensions, a global shape of 2"],
           lambda: lay.read([("w", -1, fb.DTYPE_F32, (4,), (4, 1), (0,), u.data_ptr(), 16)]))
    try:
        lay.read([("v", -1, fb.DTYPE_F32, (4,), (4,), (0,), u.data_ptr(), 16)])
        check(False, "a missing tensor was read")
    except fb.Error as e:
        check(e.args[0] == fb.EMISMATCH and '"v" is not in step 3' in e.args[1],
              "missing tensor: %r" % (e.args,))
    check(torch.equal(u, torch.ones(4)), "buffer written by a failed read")
    lay.read([("w", -1, fb.DTYPE_F32, (2,), (4,), (2,), u.data_ptr(), 8)])
    check(torch.equal(u, torch.tensor([0.0, 0.0, 1.0, 1.0])), "region read %s" % u)
    lay.close()
    raises(ValueError, ["layout is closed"], lay.tensors)


def case_newer_dtypes():
    """torch 2.x's unsigned and float8 dtypes round-trip (absent in 1.13)."""
    names = ["uint16", "uint32", "uint64", "float8_e5m2", "float8_e4m3fn"]
    have = [n for n in names if hasattr(torch, n)]
    if not have:
        print("skip newer_dtypes: torch %s has none of %s" % (torch.__version__, names))
        return
    src = {n: (torch.arange(40, dtype=torch.uint8) * 3).view(torch.uint8)
           for n in have}
    state = {n: src[n][:(40 // torch.empty(0, dtype=getattr(torch, n)).element_size())
                       * torch.empty(0, dtype=getattr(torch, n)).element_size()]
             .view(getattr(torch, n)).clone() for n in have}
    ck = firebreak.Checkpointer(state, dir="ck")
    ck.save(1)
    ck.close()
    back = {n: torch.zeros_like(t) for n, t in state.items()}
    ck2 = firebreak.Checkpointer(back, dir="ck")
    check(ck2.restore() == 1, "restore")
    for n in have:
        check(back[n].view(torch.uint8).tolist() == state[n].view(torch.uint8).tolist(),
              "dtype %s restored differently" % n)


def case_slice_input():
    """firebreak.Slice and replicated= check their arguments; a slice
    restored at another place raises naming both, the tensor untouched."""
    raises(ValueError, ["Slice", "4 elements at offset 3 do not fit the global "
                        "size 6 of dimension 0"],
           lambda: firebreak.Slice(torch.zeros(4, 2), (6, 2), (3, 0)))
    raises(ValueError, ["Slice", "1 dimensions, global shape (6, 2)"],
           lambda: firebreak.Slice(torch.zeros(4), (6, 2), (0, 0)))
    raises(TypeError, ["Slice", "expected a tensor"],
           lambda: firebreak.Slice([1, 2], (2,), (0,)))
    raises(ValueError, ["replicated", "'nope'", "['a']"],
           lambda: firebreak.Checkpointer({"a": torch.zeros(2)}, dir="ck",
                                          replicated=["nope"]))
    t = torch.arange(8.0).reshape(4, 2)
    ck = firebreak.Checkpointer({"w": firebreak.Slice(t, (8, 2), (4, 0))}, dir="ck")
    ck.save(1)
    ck.close()
    u = torch.zeros(4, 2)
    ck2 = firebreak.Checkpointer({"w": firebreak.Slice(u, (8, 2), (0, 0))}, dir="ck")
    raises(ValueError, ["tensor w", "slice at (0, 0) of a tensor of (8, 2)",
                        "step 1 has it at (4, 0) of (8, 2)"], ck2.restore)
    check(torch.equal(u, torch.zeros(4, 2)), "the slice changed though restore failed")
    ck3 = firebreak.Checkpointer({"w": firebreak.Slice(u, (8, 2), (4, 0))}, dir="ck")
    check(ck3.restore() == 1 and torch.equal(u, t), "slice restored in place")


def _pg_child(rank, world, init, ckdir):
    import torch.distributed as dist
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(v, None)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    m, o, s = make(seed=0)
    ck = firebreak.Checkpointer({"model": m}, dir=ckdir)
    if (ck.rank, ck.world_size) != (rank, world):
        raise SystemExit("rank %d of %d: the Checkpointer says rank %d of %d"
                         % (rank, world, ck.rank, ck.world_size))
    ck.save(1)
    ck.wait()
    ck.close()
    dist.barrier()
    dist.destroy_process_group()


def case_rank_from_process_group():
    """Ranks started by torch.multiprocessing, with no RANK in their
    environment: the Checkpointer takes rank and world size from the
    initialized process group (each rank its own shard), not rank 0 for all."""
    import torch.multiprocessing as mp
    ckdir = os.path.abspath("pg")
    init = "file://" + os.path.abspath("pg-init")
    try:
        mp.spawn(_pg_child, args=(2, init, ckdir), nprocs=2, join=True)
    except Exception as e:  # mp.spawn re-raises a child's failure
        check(False, "2 ranks from torch.multiprocessing: %s" % str(e).strip()[-300:])
        return
    step = os.path.join(ckdir, sorted(os.listdir(ckdir))[-1]) if os.path.isdir(ckdir) else ""
    shards = sorted(f for f in os.listdir(step) if f.endswith(".safetensors")) if step else []
    check(len(shards) == 2, "shards of 2 ranks: %s" % shards)


def case_older_step():
    """A save older than the step restored: warned once (RuntimeWarning at
    the script's line), not for steps that go forward."""
    import warnings
    ck = firebreak.Checkpointer({"w": torch.zeros(3)}, dir="ck")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ck.save(10)
        ck.save(20)
        ck.close()
        ck = firebreak.Checkpointer({"w": torch.zeros(3)}, dir="ck")
        check(ck.restore() == 20, "restore of step 20")
        ck.save(5)               # the script counting from 0 again
        ck.save(6)
        ck.save(30)
        ck.close()
    said = [w for w in got if issubclass(w.category, RuntimeWarning)]
    check(len(said) == 1, "warnings: %r" % [str(w.message) for w in said])
    check(said and "saving step 5, older than step 20 that it restored: a restart "
          "restores 20" in str(said[0].message), "warning: %r" % [str(w.message) for w in said])
    check(said and said[0].filename == __file__, "warned at %r" % (said and said[0].filename))


def case_bad_arguments():
    """Each argument checked, named in the error: steps an int64 holds
    (a larger one would be a checkpoint no restore reads), whole numbers
    only; keep, rank and world size in range; async_save a bool."""
    w = torch.zeros(3)
    ck = firebreak.Checkpointer({"w": w}, dir="ck")
    raises(ValueError, ["step 9223372036854775808", "step <= 9223372036854775807"],
           lambda: ck.save(2 ** 63))
    raises(ValueError, ["step -1"], lambda: ck.save(-1))
    raises(ValueError, ["step 2.7", "whole number"], lambda: ck.save(2.7))
    raises(TypeError, ["step", "str"], lambda: ck.save("5"))
    raises(TypeError, ["step", "bool"], lambda: ck.save(True))
    check(ck.save(2.0) is True, "save(2.0)")       # an integer-valued float is a step
    check(ck.save(torch.tensor(3)) is True, "save(torch.tensor(3))")
    ck.save(2 ** 63 - 1)
    ck.close()
    check(sorted(os.listdir("ck")) == ["step-0000000003", "step-9223372036854775807"],
          "steps saved: %s" % sorted(os.listdir("ck")))
    ck = firebreak.Checkpointer({"w": w}, dir="ck")
    check(ck.restore() == 2 ** 63 - 1, "the largest step restored")
    ck.close()
    for kw, exc, words in (({"keep": 0}, ValueError, ["keep 0"]),
                           ({"keep": "2"}, TypeError, ["keep", "str"]),
                           ({"keep": 2.5}, ValueError, ["keep 2.5"]),
                           ({"keep": 10 ** 20}, ValueError, ["keep 1000"]),
                           ({"rank": -5}, ValueError, ["rank -5"]),
                           ({"rank": "0"}, TypeError, ["rank", "str"]),
                           ({"world_size": 0}, ValueError, ["world_size 0"]),
                           ({"async_save": "no"}, TypeError, ["async_save", "'no'"])):
        raises(exc, words, lambda: firebreak.Checkpointer({"w": w}, dir="ck2", **kw))


def case_relative_dir():
    """A relative dir is where it was when the Checkpointer was made,
    whatever the script's working directory later."""
    os.mkdir("a")
    os.mkdir("b")
    os.chdir("a")
    ck = firebreak.Checkpointer({"w": torch.ones(3)}, dir="ckrel")
    check(ck.dir == os.path.join(os.getcwd(), "ckrel"), "dir %r" % ck.dir)
    ck.save(1)
    ck.wait()
    os.chdir("../b")
    ck.save(2)
    ck.wait()
    check(ck.restore() == 2, "restore after a chdir")
    ck.close()
    os.chdir("..")
    check(sorted(os.listdir("a/ckrel")) == ["step-0000000001", "step-0000000002"],
          "a/ckrel: %s" % sorted(os.listdir("a/ckrel")))
    check(os.listdir("b") == [], "b: %s" % os.listdir("b"))


def case_refused_save_no_step():
    """A save refused before anything is written is no step saved: the
    next one is not warned of as older."""
    import warnings
    ck = firebreak.Checkpointer({"a": torch.zeros(4, 4).t()}, dir="ck")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        raises(ValueError, ["contiguous"], lambda: ck.save(100))
        ck.state["a"] = ck.state["a"].contiguous()
        ck.save(1)
        ck.close()
    said = [str(x.message) for x in got if issubclass(x.category, RuntimeWarning)]
    check(not said, "warned: %s" % said)


def case_none_complete():
    """Every checkpoint's shard cut short: restore() returns None, as for
    an empty directory, but says that there were step directories and none
    could be restored (it said nothing: a script started from scratch
    without a word)."""
    w = torch.ones(3)
    with firebreak.Checkpointer({"w": w}, dir="ck") as ck:
        for s in (1, 2):
            ck.save(s)
            ck.wait()
    for s in (1, 2):
        os.truncate("ck/step-%010d/rank-00000.safetensors" % s, 100)
    with stderr_caught() as got:
        check(firebreak.Checkpointer({"w": w}, dir="ck").restore() is None, "restored")
    check("firebreak: rank 0: no checkpoint in %s/ck can be restored: 2 step "
          "directories, none complete" % os.getcwd() in got["py"], "said: %r" % (got,))
    os.mkdir("empty")
    with stderr_caught() as got:
        check(firebreak.Checkpointer({"w": w}, dir="empty").restore() is None, "empty")
    check(got["py"] == "" and got["fd"] == "", "an empty directory said: %r" % (got,))


def case_sdc_register_refused():
    """A refused sdc_register registers none of its tensors: a later call
    with the good ones works (before, the entries ahead of the bad one were
    registered, and registering them again failed: already registered)."""
    a, b = torch.ones(4), torch.ones(8)
    firebreak.sdc_clear()
    raises(TypeError, ["bad", "str, not a tensor"],
           lambda: firebreak.sdc_register({"a": a, "bad": "x"}))
    raises(ValueError, ["c", "not contiguous"],
           lambda: firebreak.sdc_register([("b", b), ("c", torch.ones(4, 4).t())]))
    raises(TypeError, ["(name, tensor) pair"],
           lambda: firebreak.sdc_register([("a", a), ("lonely",)]))
    raises(ValueError, ["a", "registered already"],
           lambda: firebreak.sdc_register([("a", a), ("a", b)]))
    try:
        firebreak.sdc_register({"a": a, "b": b})
    except Exception as e:
        check(False, "the good tensors after refused calls: %r" % (e,))
    raises(ValueError, ["b", "registered already"],
           lambda: firebreak.sdc_register({"b": b}))
    # Refused by the library (names alike in their first 47 bytes): the
    # two registered before stay, the new one is not left behind.
    long1, long2 = "x" * 47 + "1", "x" * 47 + "2"
    firebreak.sdc_register({long1: torch.ones(2)})
    raises(firebreak.Error, [long2], lambda: firebreak.sdc_register({"d": a.clone(), long2: b.clone()}))
    try:
        firebreak.sdc_register({"d": a.clone()})
    except Exception as e:
        check(False, "d after the library refused its call: %r" % (e,))
    raises(ValueError, ["a", "registered already"],
           lambda: firebreak.sdc_register({"a": a}))
    firebreak.sdc_clear()


CASES = {k[5:]: v for k, v in sorted(globals().items()) if k.startswith("case_")}


def main():
    names = sys.argv[1:] or list(CASES)
    for name in names:
        d = tempfile.mkdtemp(prefix="fbpy-")
        cwd = os.getcwd()
        os.chdir(d)
        try:
            before = failures
            CASES[name]()
            print("%s %s" % ("ok" if failures == before else "FAILED", name))
        finally:
            os.chdir(cwd)
            shutil.rmtree(d)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
