"""firebreak._hooks: supervision of unmodified PyTorch scripts.

Loaded into a rank by the supervisor (firebreak/_boot/sitecustomize.py,
on the ranks' PYTHONPATH; off with `firebreak run --no-python-hooks`).
Idle until the program imports torch; then, if the rank is attached to a
supervisor:

- each optimizer step is a training step (fb_step: heartbeat, step number,
  step time), unless the script calls firebreak.step() itself: its numbers
  win;
- every torch.distributed collective and point-to-point call, and the
  ones DDP makes inside (its gradient buckets, through a communication
  hook, its parameter and buffer broadcasts), is recorded in the rank's
  flight-recorder ring with its group, sequence number, sizes, dtype and
  the caller's file:line (the first frame outside torch);
- torch.save, dcp.save and firebreak.committed(step) tell the supervisor
  which step is durable; torch.load (dcp.load) of such a checkpoint makes
  the step count continue from its step after a restart;
- a thread answers the supervisor's dump requests on a hang: PyTorch's
  own flight-recorder dump, and where the main thread is.

docs/pytorch.md, "Unmodified scripts".  Nothing here may break the
program: a hook that fails says so once on stderr and stands aside.
"""
import _thread
import functools
import os
import sys
import threading
import time

_LISTENING = (1 << 64) - 1   # dump_done: this rank answers dump requests

_armed = False
_H = None                    # the _Hooks once torch is imported (attached)


def _warn(msg):
    sys.stderr.write("firebreak: %s\n" % msg)


# ------------------------------------------------------------------ arming

class _Loader:
    """Runs a module's own loader, then a callback (post-import hook)."""

    def __init__(self, inner, then):
        self.inner, self.then = inner, then

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        try:
            self.inner.exec_module(module)
        finally:
            # The module's spec and loader are its own again.
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self.inner
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self.inner
        try:
            self.then()
        except Exception as e:
            _warn("Python hooks on %s failed: %s: %s"
                  % (module.__name__, type(e).__name__, e))


class _Finder:
    """Watches the import of the modules in `wanted` (name -> callback)."""

    def __init__(self, wanted):
        self.wanted = dict(wanted)

    def find_spec(self, name, path=None, target=None):
        then = self.wanted.get(name)
        if then is None:
            return None
        del self.wanted[name]
        if not self.wanted and self in sys.meta_path:
            sys.meta_path.remove(self)
        for f in sys.meta_path:
            if f is self or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, then)
                return spec
        return None


_finder = None


def _when_imported(name, then):
    global _finder
    if name in sys.modules:
        then()
        return
    if _finder is None or _finder not in sys.meta_path:
        _finder = _Finder({})
        sys.meta_path.insert(0, _finder)
    _finder.wanted[name] = then


def arm():
    """From the sitecustomize: install the hooks when torch is imported."""
    global _armed
    if _armed:
        return
    _armed = True
    _when_imported("torch", _on_torch)


def _on_torch():
    global _H
    if _H is not None:
        return
    # Python processes this one starts (a data loader's workers, a helper)
    # are not the rank: they must not attach to its segment.
    os.environ["FIREBREAK_PYTHON_HOOKS"] = "0"
    import firebreak
    from firebreak import _firebreak as fb
    if not fb.attached():
        return
    import torch
    _H = _Hooks(firebreak, fb, torch)
    _H.install()


# ------------------------------------------------------------------- hooks

class _Hooks:
    def __init__(self, firebreak, fb, torch):
        self.firebreak, self.fb, self.torch = firebreak, fb, torch
        self.step = 0              # steps done, from the checkpoint's step on
        self.steps_here = 0        # optimizer steps counted in this process
        self.base_known = fb.restart_count() == 0   # a first attempt starts at 0
        self.base_said = False
        self.first_opt = None      # id of the optimizer whose steps count
        self.comms = {}            # id(pg) -> (pg, comm_id, ranks)
        self.inside = set()        # threads inside a recorded call
        self.rank = fb.rank()
        self.run_dir = fb.run_dir()
        self.dtypes = self._dtype_table()
        self.world_of = torch.distributed.distributed_c10d.GroupMember \
            if torch.distributed.is_available() else None

    # -- set-up ------------------------------------------------------------

    def install(self):
        torch, fb = self.torch, self.fb
        here = os.path.dirname(os.path.abspath(__file__))
        import sysconfig
        skip = [os.path.dirname(torch.__file__) + os.sep, here + os.sep]
        std = sysconfig.get_paths().get("stdlib")
        if std:
            skip.append(std + os.sep)
        fb.fr_skip(skip)
        self._hook_optimizer()
        self._hook_distributed()
        self._hook_ddp()
        self._hook_save_load()
        _when_imported("torch.distributed.checkpoint", self._hook_dcp)
        # The script is done when the interpreter exits: no step limit
        # for what follows (torch's own teardown takes seconds in 2.x).
        import atexit
        atexit.register(self.fb.finalize)
        t = threading.Thread(target=self._dump_loop, name="firebreak-dump",
                             daemon=True)
        t.start()

    def _dtype_table(self):
        t, fb = self.torch, self.fb
        pairs = [("bool", "DTYPE_BOOL"), ("uint8", "DTYPE_U8"), ("int8", "DTYPE_I8"),
                 ("int16", "DTYPE_I16"), ("float16", "DTYPE_F16"),
                 ("bfloat16", "DTYPE_BF16"), ("int32", "DTYPE_I32"),
                 ("float32", "DTYPE_F32"), ("complex64", "DTYPE_C64"),
                 ("float64", "DTYPE_F64"), ("int64", "DTYPE_I64")]
        return {getattr(t, a): getattr(fb, b) for a, b in pairs if hasattr(t, a)}

    # -- steps -------------------------------------------------------------

    def _hook_optimizer(self):
        import torch.optim.optimizer as optim
        reg = getattr(optim, "register_optimizer_step_post_hook", None)
        if reg is not None:
            reg(lambda opt, args, kwargs: self._after_step(opt))
            return
        # torch < 2.0: wrap each optimizer class's step once, when the
        # first instance of it is made.
        Optimizer = optim.Optimizer
        init = Optimizer.__init__
        hooks = self

        @functools.wraps(init)
        def __init__(opt, *a, **k):
            init(opt, *a, **k)
            cls = type(opt)
            step = cls.__dict__.get("step") or cls.step
            if getattr(step, "_firebreak", False):
                return
            inner = step

            @functools.wraps(inner)
            def stepped(o, *a2, **k2):
                out = inner(o, *a2, **k2)
                hooks._after_step(o)
                return out
            stepped._firebreak = True
            stepped.hooked = getattr(inner, "hooked", None)  # torch's profiler mark
            cls.step = stepped
        Optimizer.__init__ = __init__

    def _after_step(self, opt):
        if self.firebreak._user_steps:
            return                 # the script counts its own steps
        if self.first_opt is None:
            self.first_opt = id(opt)
        elif id(opt) != self.first_opt:
            return                 # one step per iteration: the first optimizer's
        if self.steps_here == 0 and not self.base_known and not self.base_said:
            self.base_said = True
            msg = ("attempt %d: the step of the checkpoint this script restored is "
                   "not known (no torch.load of a checkpoint saved under firebreak); "
                   "counting steps from 0" % self.fb.restart_count())
            _warn(msg)
            self.fb.note(0, 0, msg)
        self.steps_here += 1
        self.step += 1
        if self.steps_here == 1:
            # A script that counts its own steps calls firebreak.step after
            # its first optimizer step: until then, only a sign of life.
            self.fb.heartbeat()
            return
        self.fb.step(self.step)

    def current_step(self):
        if self.firebreak._user_steps:
            return self.firebreak._last_step
        return self.step

    # -- collectives -------------------------------------------------------

    def _comm(self, group):
        dist = self.torch.distributed
        c10d = dist.distributed_c10d
        if group is None:
            group = c10d._get_default_group()
        hit = self.comms.get(id(group))
        if hit is not None and hit[0] is group:
            return hit
        ranks = list(c10d.get_process_group_ranks(group))
        names = getattr(c10d, "_pg_names", None)
        if names is None:
            names = c10d._world.pg_names
        name = str(names.get(group, "?"))
        import hashlib
        cid = int.from_bytes(hashlib.blake2b(("torch pg " + name).encode(),
                                             digest_size=8).digest(), "little")
        cid = cid or 1
        me = dist.get_rank()
        grank = ranks.index(me) if me in ranks else 0
        first = ranks[0] if ranks else -1
        stride = ranks[1] - ranks[0] if len(ranks) > 1 else 1
        if any(ranks[i + 1] - ranks[i] != stride for i in range(len(ranks) - 1)) \
                or stride <= 0:
            stride = 0
        self.fb.fr_comm(cid, max(len(ranks), 1), grank, first, stride,
                        "pg " + name)
        # the group, its id, its world ranks, world rank -> group rank
        hit = (group, cid, ranks, {r: i for i, r in enumerate(ranks)})
        self.comms[id(group)] = hit
        return hit

    def _record(self, op, group, tensor, count, out_count, peer=-1, flags=0):
        # The hot path: one dict lookup for the group (GroupMember.WORLD is
        # the default group in 1.13 and 2.x alike), one for the dtype.
        if group is None:
            group = self.world_of.WORLD
        hit = self.comms.get(id(group))
        if hit is None or hit[0] is not group:
            hit = self._comm(group)
        if peer is None:
            peer = -1
        elif peer >= 0:
            peer = hit[3].get(peer, -1)
        if tensor is None:
            dt, eb = -1, 0
        else:
            dt, eb = self.dtypes.get(tensor.dtype), 0
            if dt is None:
                dt, eb = -1, tensor.element_size()
        return self.fb.fr_begin(hit[1], op, dt, eb, count, out_count, peer, flags)

    def _hook_distributed(self):
        dist = self.torch.distributed
        if not dist.is_available():
            return
        c10d = dist.distributed_c10d
        fb = self.fb
        n = lambda t: t.numel() if t is not None else 0          # noqa: E731
        total = lambda ts: sum(t.numel() for t in ts) if ts else 0  # noqa: E731
        # name: (op, flags, what(args) -> (group, tensor, count, out, peer))
        specs = {
            "all_reduce": (fb.OP_ALLREDUCE, 0, ("tensor", "group"),
                           lambda a: (a[1], a[0], n(a[0]), n(a[0]), -1)),
            "broadcast": (fb.OP_BROADCAST, 0, ("tensor", "src", "group"),
                          lambda a: (a[2], a[0], n(a[0]), n(a[0]), a[1])),
            "reduce": (fb.OP_REDUCE, 0, ("tensor", "dst", "group"),
                       lambda a: (a[2], a[0], n(a[0]), n(a[0]), a[1])),
            "barrier": (fb.OP_BARRIER, 0, ("group",),
                        lambda a: (a[0], None, 0, 0, -1)),
            "all_gather": (fb.OP_ALLGATHER, 0, ("tensor_list", "tensor", "group"),
                           lambda a: (a[2], a[1], n(a[1]), total(a[0]), -1)),
            "all_gather_into_tensor": (fb.OP_ALLGATHER, 0,
                                       ("output_tensor", "input_tensor", "group"),
                                       lambda a: (a[2], a[1], n(a[1]), n(a[0]), -1)),
            "_all_gather_base": (fb.OP_ALLGATHER, 0,
                                 ("output_tensor", "input_tensor", "group"),
                                 lambda a: (a[2], a[1], n(a[1]), n(a[0]), -1)),
            "reduce_scatter": (fb.OP_REDUCE_SCATTER, 0, ("output", "input_list", "group"),
                               lambda a: (a[2], a[0], total(a[1]), n(a[0]), -1)),
            "reduce_scatter_tensor": (fb.OP_REDUCE_SCATTER, 0, ("output", "input", "group"),
                                      lambda a: (a[2], a[0], n(a[1]), n(a[0]), -1)),
            "_reduce_scatter_base": (fb.OP_REDUCE_SCATTER, 0, ("output", "input", "group"),
                                     lambda a: (a[2], a[0], n(a[1]), n(a[0]), -1)),
            "all_to_all": (fb.OP_ALLTOALL, fb.FR_VARIABLE,
                           ("output_tensor_list", "input_tensor_list", "group"),
                           lambda a: (a[2], a[1][0] if a[1] else None, total(a[1]),
                                      total(a[0]), -1)),
            "all_to_all_single": (fb.OP_ALLTOALL, fb.FR_VARIABLE,
                                  ("output", "input", "group"),
                                  lambda a: (a[2], a[1], n(a[1]), n(a[0]), -1)),
            "gather": (fb.OP_GATHER, fb.FR_VARIABLE, ("tensor", "gather_list", "dst", "group"),
                       lambda a: (a[3], a[0], n(a[0]), total(a[1]), a[2])),
            "scatter": (fb.OP_SCATTER, fb.FR_VARIABLE, ("tensor", "scatter_list", "src", "group"),
                        lambda a: (a[3], a[0], total(a[1]), n(a[0]), a[2])),
            "send": (fb.OP_SEND, fb.FR_P2P, ("tensor", "dst", "group"),
                     lambda a: (a[2], a[0], n(a[0]), n(a[0]), a[1])),
            "isend": (fb.OP_SEND, fb.FR_P2P, ("tensor", "dst", "group"),
                      lambda a: (a[2], a[0], n(a[0]), n(a[0]), a[1])),
            "recv": (fb.OP_RECV, fb.FR_P2P, ("tensor", "src", "group"),
                     lambda a: (a[2], a[0], n(a[0]), n(a[0]), a[1])),
            "irecv": (fb.OP_RECV, fb.FR_P2P, ("tensor", "src", "group"),
                      lambda a: (a[2], a[0], n(a[0]), n(a[0]), a[1])),
            # Called by DDP: its parameter and buffer broadcasts, its check
            # that every rank has the same parameters.
            "_broadcast_coalesced": (fb.OP_BROADCAST, 0,
                                     ("process_group", "tensors", "src"),
                                     lambda a: (a[0], a[1][0] if a[1] else None,
                                                total(a[1]), total(a[1]), a[2])),
            "_verify_params_across_processes": (
                fb.OP_ALLGATHER, 0, ("process_group", "tensors"),
                lambda a: (a[0], None, len(a[1]),
                           len(a[1]) * len(self._comm(a[0])[2]), -1)),
        }
        for name, (op, flags, params, what) in specs.items():
            for mod in (dist, c10d):
                orig = getattr(mod, name, None)
                if orig is None or getattr(orig, "_firebreak", False):
                    continue
                w = self._wrap(orig, op, flags, params, what)
                setattr(mod, name, w)
                if mod is dist and getattr(c10d, name, None) is orig:
                    setattr(c10d, name, w)

    def _wrap(self, orig, op, flags, params, what):
        extract = _extractor(orig, params)
        hooks, fb = self, self.fb
        fr_end, inside = fb.fr_end, self.inside
        get_ident = _thread.get_ident

        @functools.wraps(orig)
        def recorded(*args, **kwargs):
            tid = get_ident()
            if tid in inside:
                return orig(*args, **kwargs)   # a call torch makes inside one we record
            h = 0
            try:
                g, t, cnt, out, peer = what(extract(args, kwargs))
                h = hooks._record(op, g, t, cnt, out, peer, flags)
            except Exception as e:            # never the program's problem
                hooks._failed("recording %s" % orig.__name__, e)
            inside.add(tid)
            try:
                ret = orig(*args, **kwargs)
            finally:
                inside.discard(tid)
            if h:
                if ret is None or not hasattr(ret, "get_future"):
                    fr_end(h)
                else:                          # async_op: a Work
                    hooks._end_later(ret, h)
            return ret
        recorded._firebreak = True
        return recorded

    def _end_later(self, work, h):
        """An async op: completed when its future is."""
        try:
            work.get_future().then(lambda fut: self.fb.fr_end(h))
        except Exception:
            pass  # no future (an old backend): it stays "started"

    _said = set()

    def _failed(self, what, e):
        if what not in self._said:
            self._said.add(what)
            _warn("Python hooks: %s failed (%s: %s); not recorded from now on "
                  "where it fails" % (what, type(e).__name__, e))

    def _hook_ddp(self):
        try:
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        except Exception:
            return
        fwd, reg = DDP.forward, DDP.register_comm_hook
        builtin = getattr(DDP, "_register_builtin_comm_hook", None)
        hooks = self

        # DDP's gradient buckets are all-reduced in C++; through a Python
        # communication hook (PyTorch's own allreduce_hook: the same
        # arithmetic) they go through dist.all_reduce, which is recorded.
        # Registered at the first forward unless the script registered one.
        @functools.wraps(fwd)
        def forward(self, *a, **k):
            d = self.__dict__
            if not d.get("_firebreak_hook"):
                d["_firebreak_hook"] = True
                if not d.get("_firebreak_user_hook"):
                    try:
                        reg(self, self.process_group, default_hooks.allreduce_hook)
                    except Exception as e:
                        hooks._failed("DDP communication hook", e)
            return fwd(self, *a, **k)

        @functools.wraps(reg)
        def register_comm_hook(self, state, hook):
            self.__dict__["_firebreak_user_hook"] = True
            return reg(self, state, hook)

        DDP.forward = forward
        DDP.register_comm_hook = register_comm_hook
        if builtin is not None:
            @functools.wraps(builtin)
            def _register_builtin_comm_hook(self, comm_hook_type):
                self.__dict__["_firebreak_user_hook"] = True
                return builtin(self, comm_hook_type)
            DDP._register_builtin_comm_hook = _register_builtin_comm_hook

    # -- checkpoints -------------------------------------------------------

    def _saves_dir(self):
        return os.path.join(self.run_dir, "python-saves") if self.run_dir else None

    def _saved(self, path, ns, what):
        """The script wrote a checkpoint at `path`: make it durable, tell
        the supervisor its step, remember it for a load after a restart."""
        step = self.current_step()
        st = os.stat(path)
        if os.path.isdir(path):
            for root, _, files in os.walk(path):
                for f in files:
                    _fsync(os.path.join(root, f))
        else:
            _fsync(path)
        _fsync(os.path.dirname(os.path.abspath(path)) or ".")
        d = self._saves_dir()
        if d:
            os.makedirs(d, mode=0o700, exist_ok=True)
            line = "%d %d %d %d %d %s\n" % (step, st.st_dev, st.st_ino, st.st_size,
                                            st.st_mtime_ns, os.path.realpath(path))
            with open(os.path.join(d, "rank-%d" % self.rank), "a") as f:
                f.write(line)
        text = "%s %s" % (what, path)
        self.fb.committed(step, st.st_size, ns, text[-190:])

    def _step_of(self, path):
        """The step a checkpoint was saved at under firebreak, or None."""
        d = self._saves_dir()
        if not d or not os.path.isdir(d):
            return None
        st = os.stat(path)
        real = os.path.realpath(path)
        best = None
        for name in sorted(os.listdir(d)):
            try:
                with open(os.path.join(d, name)) as f:
                    for line in f:
                        p = line.rstrip("\n").split(" ", 5)
                        if len(p) != 6:
                            continue
                        step, dev, ino, size, mtime = (int(x) for x in p[:5])
                        same_file = (dev, ino, size, mtime) == (
                            st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                        if same_file or (os.path.isdir(path) and p[5] == real):
                            best = step
            except (OSError, ValueError):
                continue
        return best

    def _loaded(self, path, what):
        if self.steps_here or self.firebreak._user_steps:
            return    # a load during training (evaluation...): not the resume
        step = self._step_of(path)
        if step is None:
            return
        self.step = step
        self.base_known = True
        msg = "%s %s: the step count continues from step %d" % (what, path, step)
        self.fb.note(0, step, msg[-190:])

    def _hook_save_load(self):
        torch, hooks = self.torch, self
        save, load = torch.save, torch.load

        @functools.wraps(save)
        def saved(obj, f, *a, **k):
            t0 = time.monotonic_ns()
            ret = save(obj, f, *a, **k)
            path = _path_of(f)
            if path is not None:
                try:
                    hooks._saved(path, time.monotonic_ns() - t0, "torch.save")
                except Exception as e:
                    hooks._failed("torch.save hook", e)
            return ret

        @functools.wraps(load)
        def loaded(f, *a, **k):
            ret = load(f, *a, **k)
            path = _path_of(f)
            if path is not None:
                try:
                    hooks._loaded(path, "torch.load")
                except Exception as e:
                    hooks._failed("torch.load hook", e)
            return ret
        torch.save = saved
        torch.load = loaded
        ser = torch.serialization
        if ser.save is save:
            ser.save = saved
        if ser.load is load:
            ser.load = loaded

    def _hook_dcp(self):
        import torch.distributed.checkpoint as dcp
        hooks = self

        def where(a, k, attr):
            p = k.get("checkpoint_id")
            if p is None:
                io = k.get(attr) or next((x for x in a if hasattr(x, "path")), None)
                p = getattr(io, "path", None)
            return _path_of(p) if p is not None else None

        def wrap(fn, is_save, attr):
            @functools.wraps(fn)
            def hooked(*a, **k):
                t0 = time.monotonic_ns()
                ret = fn(*a, **k)
                try:
                    path = where(a, k, attr)
                    if path is not None and is_save:
                        hooks._saved(path, time.monotonic_ns() - t0, "dcp.save")
                    elif path is not None:
                        hooks._loaded(path, "dcp.load")
                except Exception as e:
                    hooks._failed("dcp hook", e)
                return ret
            return hooked
        for name, is_save, attr in (("save", 1, "storage_writer"),
                                    ("save_state_dict", 1, "storage_writer"),
                                    ("load", 0, "storage_reader"),
                                    ("load_state_dict", 0, "storage_reader")):
            fn = getattr(dcp, name, None)
            if fn is not None:
                setattr(dcp, name, wrap(fn, is_save, attr))

    # -- dump requests -----------------------------------------------------

    def _dump_loop(self):
        fb = self.fb
        fb.dump_done(_LISTENING)
        last = 0
        while True:
            req = fb.dump_wait(last, 1000)
            if req == last or req == 0:
                continue
            last = req
            try:
                self._answer()
            except Exception as e:
                self._failed("dump request", e)
            fb.dump_done(req)

    def _answer(self):
        """Where the main thread is, and PyTorch's flight recorder."""
        frame = sys._current_frames().get(threading.main_thread().ident)
        skip = (os.path.dirname(self.torch.__file__) + os.sep,
                os.path.dirname(os.path.abspath(__file__)) + os.sep)
        import sysconfig
        std = sysconfig.get_paths().get("stdlib")
        if std:
            skip += (std + os.sep,)
        while frame is not None and frame.f_code.co_filename.startswith(skip):
            frame = frame.f_back
        if frame is not None:
            self.fb.note(self.fb.NOTE_WHERE, self.current_step(),
                         "%s:%d in %s" % (os.path.basename(frame.f_code.co_filename),
                                          frame.f_lineno, frame.f_code.co_name))
        self._torch_dump()

    def _torch_dump(self):
        c = getattr(self.torch._C, "_distributed_c10d", None)
        dump = getattr(c, "_dump_fr_trace", None) if c is not None else None
        prefix = (os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or
                  os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"))
        if dump is None or not prefix:
            return                   # torch < 2.7: no flight recorder to ask
        backend = self.torch.distributed.get_backend() \
            if self.torch.distributed.is_initialized() else "gloo"
        data = dump(includeCollectives=True, includeStackTraces=False,
                    onlyActive=False, backend=str(backend))
        path = "%s%d" % (prefix, self.torch.distributed.get_rank()
                         if self.torch.distributed.is_initialized() else self.rank)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)


def _extractor(fn, params):
    """A function (args, kwargs) -> the values of `params` in a call of
    fn, defaults filled in: generated once per function from its
    signature, so a call costs a few indexings."""
    import inspect
    try:
        sig = inspect.signature(fn)
        names = list(sig.parameters)
        defaults = {k: p.default for k, p in sig.parameters.items()
                    if p.default is not inspect.Parameter.empty}
    except (TypeError, ValueError):   # a builtin without a signature
        names, defaults = list(params), {}
    d = {p: defaults.get(p) for p in params}
    lines = ["def extract(args, kwargs):", "    n = len(args)"]
    for k, p in enumerate(params):
        i = names.index(p) if p in names else -1
        if i >= 0:
            lines.append("    v%d = args[%d] if n > %d else kwargs.get(%r, D[%r])"
                         % (k, i, i, p, p))
        else:
            lines.append("    v%d = kwargs.get(%r, D[%r])" % (k, p, p))
    lines.append("    return (%s,)" % ", ".join("v%d" % k for k in range(len(params))))
    ns = {"D": d}
    exec("\n".join(lines), ns)
    return ns["extract"]


def _path_of(f):
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        p = os.fspath(f)
        return os.fsdecode(p)
    return None


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def committed(step):
    """firebreak.committed(step): the program's own checkpoint of `step` is
    durable (for checkpoints written other ways than torch.save and
    dcp.save).  A no-op outside the supervisor."""
    from firebreak import _firebreak as fb
    fb.committed(int(step), 0, 0, "firebreak.committed")
