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
import functools
import os
import sys
import threading
import time

_LISTENING = (1 << 64) - 1   # dump_done: this rank answers dump requests

_PENDING_MAX = 256           # async ops without a future, awaiting wait()

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
        self._pending = {}         # id(work) -> (work, handle): no future
        self._work_types = set()   # Work classes whose wait() is watched
        self.rank = fb.rank()
        self.run_dir = fb.run_dir()
        self.dtypes = self._dtype_table()

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
        # Not when an exception ended it: the rank failed in the phase it
        # was in (it said "in phase done", and a crash in the teardown
        # after it read as "after it had finished").
        import atexit
        raised = []
        before = sys.excepthook

        def excepthook(kind, value, tb):
            raised.append(kind)
            before(kind, value, tb)
        sys.excepthook = excepthook

        def at_exit():
            if not raised:
                self.fb.finalize()
        atexit.register(at_exit)
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

    def _group_of(self, group):
        """For the C side (Recorded): a group seen the first time."""
        hit = self._comm(group)
        return hit[1], max(len(hit[2]), 1), hit[3]

    def _world(self):
        """Where the default group is read, per call, by the C side:
        torch 2.x keeps it in _world._default_pg (GroupMember.WORLD is a
        property over it), 1.13 in GroupMember.WORLD."""
        c10d = self.torch.distributed.distributed_c10d
        w = getattr(c10d, "_world", None)
        if w is not None and "_default_pg" in getattr(w, "__dict__", {}):
            return w, "_default_pg"
        return c10d.GroupMember, "WORLD"

    def _read_tensors(self):
        """Let the C side read tensors' numel and dtype in place (without
        calling torch, _firebreak.c "Tensors read in place"), where
        probes here find where this torch keeps them; off with
        FIREBREAK_HOOKS_ASK_TORCH=1.  The probes: every dtype of the table
        in several shapes (empty, one element, rows, a strided view, one
        resized in place, one whose .data was replaced), and Parameters."""
        fb, torch = self.fb, self.torch
        if os.environ.get("FIREBREAK_HOOKS_ASK_TORCH", "0") not in ("", "0"):
            fb.hooks_tensors(None, None)
            return
        try:
            Tensor, Parameter = torch.Tensor, torch.nn.Parameter
            probes = []
            for i, (dt, code) in enumerate(self.dtypes.items()):
                shapes = ((0,), (1,), (7 + i,), (3, 5 + i), (1000 + 37 * i,))
                ts = [torch.empty(s, dtype=dt) for s in shapes]
                ts.append(torch.empty(64 + 2 * i, dtype=dt)[::2])
                r = torch.empty(5, dtype=dt)
                r.resize_(11 + i)
                d = torch.empty(2, dtype=dt)
                d.data = torch.empty(9 + i, dtype=dt)
                ts += [r, d]
                if dt.is_floating_point:
                    ts.append(Parameter(torch.empty(4 + i, dtype=dt)))
                probes += [(t, t._cdata, t.numel(), code) for t in ts]
            why = fb.hooks_tensors((Tensor, Parameter), probes)
        except Exception as e:
            why = "%s: %s" % (type(e).__name__, e)
        if why:
            fb.hooks_tensors(None, None)
            _warn("Python hooks: tensors' sizes and dtypes asked of torch on every "
                  "collective (%s)" % why)

    def _hook_distributed(self):
        dist = self.torch.distributed
        if not dist.is_available():
            return
        c10d = dist.distributed_c10d
        fb = self.fb
        world_obj, world_attr = self._world()
        fb.hooks_setup(self._group_of, self._end_later, self._failed,
                       world_obj, world_attr, self.dtypes)
        self._read_tensors()
        N, A, F = fb.K_NONE, fb.K_ARG, fb.K_FIRST
        NUM, SUM, LEN = fb.K_NUMEL, fb.K_SUM, fb.K_LEN
        # name: (op, flags, params, fields): fields say where the group,
        # the tensor, the input count, the output count and the peer come
        # from, each (kind, index in params).
        one = ((A, 1), (A, 0), (NUM, 0), (NUM, 0), (N, 0))        # tensor, group
        rooted = ((A, 2), (A, 0), (NUM, 0), (NUM, 0), (A, 1))     # tensor, peer, group
        base = ((A, 2), (A, 1), (NUM, 1), (NUM, 0), (N, 0))       # out, in, group
        rs_base = ((A, 2), (A, 0), (NUM, 1), (NUM, 0), (N, 0))
        specs = {
            "all_reduce": (fb.OP_ALLREDUCE, 0, ("tensor", "group"), one),
            "broadcast": (fb.OP_BROADCAST, 0, ("tensor", "src", "group"), rooted),
            "reduce": (fb.OP_REDUCE, 0, ("tensor", "dst", "group"), rooted),
            "barrier": (fb.OP_BARRIER, 0, ("group",),
                        ((A, 0), (N, 0), (N, 0), (N, 0), (N, 0))),
            "all_gather": (fb.OP_ALLGATHER, 0, ("tensor_list", "tensor", "group"),
                           ((A, 2), (A, 1), (NUM, 1), (SUM, 0), (N, 0))),
            "all_gather_into_tensor": (fb.OP_ALLGATHER, 0,
                                       ("output_tensor", "input_tensor", "group"), base),
            "_all_gather_base": (fb.OP_ALLGATHER, 0,
                                 ("output_tensor", "input_tensor", "group"), base),
            "reduce_scatter": (fb.OP_REDUCE_SCATTER, 0, ("output", "input_list", "group"),
                               ((A, 2), (A, 0), (SUM, 1), (NUM, 0), (N, 0))),
            "reduce_scatter_tensor": (fb.OP_REDUCE_SCATTER, 0,
                                      ("output", "input", "group"), rs_base),
            "_reduce_scatter_base": (fb.OP_REDUCE_SCATTER, 0,
                                     ("output", "input", "group"), rs_base),
            "all_to_all": (fb.OP_ALLTOALL, fb.FR_VARIABLE,
                           ("output_tensor_list", "input_tensor_list", "group"),
                           ((A, 2), (F, 1), (SUM, 1), (SUM, 0), (N, 0))),
            "all_to_all_single": (fb.OP_ALLTOALL, fb.FR_VARIABLE,
                                  ("output", "input", "group"), base),
            "gather": (fb.OP_GATHER, fb.FR_VARIABLE,
                       ("tensor", "gather_list", "dst", "group"),
                       ((A, 3), (A, 0), (NUM, 0), (SUM, 1), (A, 2))),
            "scatter": (fb.OP_SCATTER, fb.FR_VARIABLE,
                        ("tensor", "scatter_list", "src", "group"),
                        ((A, 3), (A, 0), (SUM, 1), (NUM, 0), (A, 2))),
            "send": (fb.OP_SEND, fb.FR_P2P, ("tensor", "dst", "group"), rooted),
            "isend": (fb.OP_SEND, fb.FR_P2P, ("tensor", "dst", "group"), rooted),
            "recv": (fb.OP_RECV, fb.FR_P2P, ("tensor", "src", "group"), rooted),
            "irecv": (fb.OP_RECV, fb.FR_P2P, ("tensor", "src", "group"), rooted),
            # Called by DDP: its parameter and buffer broadcasts, its check
            # that every rank has the same parameters.
            "_broadcast_coalesced": (fb.OP_BROADCAST, 0,
                                     ("process_group", "tensors", "src"),
                                     ((A, 0), (F, 1), (SUM, 1), (SUM, 1), (A, 2))),
            "_verify_params_across_processes": (
                fb.OP_ALLGATHER, 0, ("process_group", "tensors"),
                ((A, 0), (N, 0), (LEN, 1), (fb.K_LEN_GROUP, 1), (N, 0))),
        }
        for name, (op, flags, params, fields) in specs.items():
            for mod in (dist, c10d):
                orig = getattr(mod, name, None)
                if orig is None or getattr(orig, "_firebreak", False):
                    continue
                w = self._wrap(orig, op, flags, params, fields)
                setattr(mod, name, w)
                if mod is dist and getattr(c10d, name, None) is orig:
                    setattr(c10d, name, w)

    def _wrap(self, orig, op, flags, params, fields):
        """A firebreak._firebreak.Recorded over orig: the per-call path is
        C (_firebreak.c, "recorded torch.distributed calls"); it looks
        like orig to introspection (functools.update_wrapper)."""
        w = self.fb.Recorded(orig, op, flags, _params(orig, params), fields,
                             "recording %s" % getattr(orig, "__name__", "?"))
        try:
            functools.update_wrapper(w, orig)
        except Exception:
            w.__wrapped__ = orig
        w._firebreak = True
        return w

    def _end_later(self, work, h):
        """An async op (async_op=True, isend, irecv): completed when its
        Work's future is; a Work without one (gloo's send and recv, any
        op of an older backend) when its wait() returns."""
        if not hasattr(work, "get_future"):
            self.fb.fr_end(h)          # not a Work: done when returned
            return
        try:
            fut = work.get_future()
        except Exception:
            fut = None
        if fut is not None:
            fut.then(lambda _: self.fb.fr_end(h))
            return
        self._watch_wait(type(work))
        if len(self._pending) >= _PENDING_MAX:
            # Never waited on: give up the oldest (it stays "started")
            # rather than keep its tensors alive.
            self._pending.pop(next(iter(self._pending)))
        self._pending[id(work)] = (work, h)

    def _watch_wait(self, cls):
        """Wrap the wait() of a Work class, once: the Work objects torch
        returns take no attributes of their own.  (gloo's send and recv
        Work says it is completed only once waited on, so wait() is where
        their end is seen.)"""
        if cls in self._work_types:
            return
        self._work_types.add(cls)
        pending, fr_end = self._pending, self.fb.fr_end
        wait = cls.wait

        @functools.wraps(wait)
        def waited(work, *a, **k):
            ret = wait(work, *a, **k)
            if pending and ret is not False:      # False: timed out
                p = pending.pop(id(work), None)   # a key held: the same Work
                if p is not None:
                    fr_end(p[1])
            return ret
        try:
            cls.wait = waited
        except (AttributeError, TypeError) as e:
            self._failed("watching %s.wait" % cls.__name__, e)

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
        if step is not None:
            self.resumed(step, "%s %s" % (what, path))

    def resumed(self, step, what):
        """The script resumed from its checkpoint of `step` (before its first
        optimizer step here): the step count continues from it."""
        if self.steps_here or self.firebreak._user_steps:
            return
        self.step = step
        self.base_known = True
        msg = "%s: the step count continues from step %d" % (what, step)
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


def _params(fn, params):
    """Where each of `params` is in a call of fn: (position or -1,
    keyword, default), from its signature (a builtin without one: in the
    order given)."""
    import inspect
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return tuple((i, p, None) for i, p in enumerate(params))
    pos, out = {}, []
    for i, (k, p) in enumerate(sig.parameters.items()):
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            pos[k] = i
    for p in params:
        q = sig.parameters.get(p)
        d = None if q is None or q.default is inspect.Parameter.empty else q.default
        out.append((pos.get(p, -1), p, d))
    return tuple(out)


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


def restored(step, where):
    """firebreak.Checkpointer.restore loaded `step` from `where`: the hooks
    count steps from it (no torch.load of a file of ours to tell them)."""
    if _H is not None:
        _H.resumed(int(step), "firebreak.Checkpointer restored %s" % where)


def committed(step):
    """firebreak.committed(step): the program's own checkpoint of `step` is
    durable (for checkpoints written other ways than torch.save and
    dcp.save).  A no-op outside the supervisor."""
    from firebreak import _firebreak as fb
    fb.committed(int(step), 0, 0, "firebreak.committed")
