"""Torch glue: a training program's state as libfirebreak checkpoints.

The state is a dict of objects with state_dict()/load_state_dict() (model,
optimizer, scheduler) or tensors.  Each save flattens every state dict into
named CPU tensors ("model/fc.weight", "optim/state/0/exp_avg"), registered
with the C engine in place (no copy by Python), plus one uint8 tensor,
"__firebreak__/meta", that holds the rest, pickled: the state dicts'
structure and non-tensor values (param_groups, lr, scheduler counters),
the torch, numpy and `random` RNG states, and `extra`.

Registration is planned again whenever the set of tensors, their storage
or the meta's capacity changed since the last save (AdamW's moments appear
after the first optimizer step; load_state_dict replaces tensors): the old
handle is closed (waiting for its save in flight) and a new one registered.

Restore reads which tensors the newest complete checkpoint holds
(_firebreak.layout), allocates them, restores into them through a handle of
their own (the engine verifies every hash before writing a byte), checks
them against the live objects (names, dtypes, shapes) and only then loads
them with load_state_dict / copy_, so a mismatch raises before anything
changed.  The meta is unpickled with an allow-list (plain Python values,
OrderedDict), never arbitrary classes.
"""
import collections
import copy
import io
import os
import pickle
import random
import struct

import torch

from . import _firebreak
from ._firebreak import Error

try:
    import numpy
except ImportError:  # pragma: no cover - numpy is optional
    numpy = None

META = "__firebreak__/meta"
META_FORMAT = 1
_META_HDR = struct.Struct("<4sQ")   # b"FBPY", payload length

_DTYPES = {
    torch.bool: _firebreak.DTYPE_BOOL, torch.uint8: _firebreak.DTYPE_U8,
    torch.int8: _firebreak.DTYPE_I8, torch.int16: _firebreak.DTYPE_I16,
    torch.float16: _firebreak.DTYPE_F16, torch.bfloat16: _firebreak.DTYPE_BF16,
    torch.int32: _firebreak.DTYPE_I32, torch.float32: _firebreak.DTYPE_F32,
    torch.complex64: _firebreak.DTYPE_C64, torch.float64: _firebreak.DTYPE_F64,
    torch.int64: _firebreak.DTYPE_I64,
}
_TORCH_OF = {v: k for k, v in _DTYPES.items()}


class _TensorRef:
    """Where a tensor was in a pickled state dict: its checkpoint name."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return (_TensorRef, (self.name,))


class _SafeUnpickler(pickle.Unpickler):
    """Plain values only: a checkpoint must not be able to run code."""
    _ALLOWED = {("collections", "OrderedDict"), ("builtins", "set"),
                ("builtins", "frozenset"), ("builtins", "complex"),
                ("builtins", "slice"), ("builtins", "range"),
                ("firebreak._torch", "_TensorRef")}

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return _TensorRef if name == "_TensorRef" else super().find_class(module, name)
        raise pickle.UnpicklingError(
            "checkpoint meta refers to %s.%s: only plain Python values "
            "(numbers, strings, bytes, lists, tuples, dicts, sets) are stored"
            % (module, name))


def _safe_loads(data):
    return _SafeUnpickler(io.BytesIO(data)).load()


def _name_part(key, where):
    s = str(key)
    if not s or not all(0x20 < ord(c) < 0x7f for c in s) or "/" in s:
        raise ValueError("%s: key %r: checkpoint names are printable ASCII "
                         "without spaces or '/'" % (where, key))
    return s


def _strip(obj, path, out):
    """obj with every tensor replaced by a _TensorRef; out[name] = tensor."""
    if isinstance(obj, torch.Tensor):
        name = "/".join(path)
        if name in out:
            raise ValueError("tensor %s: two tensors map to this name" % name)
        out[name] = obj
        return _TensorRef(name)
    if isinstance(obj, dict):
        new = copy.copy(obj)   # keeps the type and e.g. _metadata
        for k, v in obj.items():
            new[k] = _strip(v, path + [_name_part(k, "/".join(path))], out)
        return new
    if isinstance(obj, (list, tuple)):
        items = [_strip(v, path + [str(i)], out) for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _fill(obj, tensors):
    """The inverse of _strip, with the tensors restored."""
    if isinstance(obj, _TensorRef):
        return tensors[obj.name]
    if isinstance(obj, dict):
        new = copy.copy(obj)
        for k, v in obj.items():
            new[k] = _fill(v, tensors)
        return new
    if isinstance(obj, list):
        return [_fill(v, tensors) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_fill(v, tensors) for v in obj)
    return obj


def _check_tensor(name, t):
    if t.device.type != "cpu":
        raise ValueError("tensor %s: on %s; this version checkpoints CPU tensors "
                         "only" % (name, t.device))
    if t.dtype not in _DTYPES:
        raise TypeError("tensor %s: dtype %s is not supported; expected one of %s"
                        % (name, t.dtype, ", ".join(str(d) for d in _DTYPES)))
    if t.is_sparse or t.layout != torch.strided:
        raise ValueError("tensor %s: layout %s; expected a dense (strided) tensor"
                         % (name, t.layout))
    if not t.is_contiguous():
        raise ValueError("tensor %s: not contiguous (strides %s for shape %s); "
                         "expected a contiguous tensor (call .contiguous() on it "
                         "where it is created)" % (name, t.stride(), tuple(t.shape)))


def _rng_state():
    s = {"torch": bytes(torch.get_rng_state().numpy()),
         "random": random.getstate()}
    if numpy is not None:
        kind, keys, pos, has_gauss, gauss = numpy.random.get_state()
        s["numpy"] = (kind, keys.tolist(), pos, has_gauss, gauss)
    return s


def _set_rng_state(s):
    torch.set_rng_state(torch.frombuffer(bytearray(s["torch"]), dtype=torch.uint8))
    random.setstate(s["random"])
    if numpy is not None and "numpy" in s:
        kind, keys, pos, has_gauss, gauss = s["numpy"]
        numpy.random.set_state((kind, numpy.array(keys, dtype=numpy.uint32), pos,
                                has_gauss, gauss))


def _default_dir():
    # Under the supervisor the engine picks FIREBREAK_CKPT_DIR, else
    # <run_dir>/checkpoints (dir=None); without it, ./checkpoints.
    return None if _firebreak.attached() else "checkpoints"


class Checkpointer:
    """Saves and restores `state` (a dict of objects with state_dict() and
    load_state_dict(), or tensors), the RNG states and `extra` (small
    plain-Python user state, e.g. a data position) as firebreak checkpoints.

    dir: the checkpoint directory; default the supervisor's, else
    ./checkpoints.  keep: newest complete checkpoints kept.  snapshot:
    "auto", "copy" or "protect" (docs/checkpoint.md).
    """

    def __init__(self, state, extra=None, dir=None, keep=2, snapshot="auto",
                 async_save=True, rank=None, world_size=None):
        if not isinstance(state, dict) or not state:
            raise TypeError("state: expected a non-empty dict of objects with "
                            "state_dict()/load_state_dict(), or tensors")
        for key, obj in state.items():
            _name_part(key, "state")
            if not isinstance(obj, torch.Tensor) and not (
                    hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError("state[%r]: %s has no state_dict()/load_state_dict() "
                                "and is not a tensor" % (key, type(obj).__name__))
        snaps = {"auto": _firebreak.SNAPSHOT_AUTO, "copy": _firebreak.SNAPSHOT_COPY,
                 "protect": _firebreak.SNAPSHOT_PROTECT}
        if snapshot not in snaps:
            raise ValueError("snapshot %r: expected auto, copy or protect" % snapshot)
        self.state = state
        self.extra = {} if extra is None else extra
        self._opts = dict(dir=os.fspath(dir) if dir is not None else _default_dir(),
                          keep=keep, snapshot=snaps[snapshot],
                          async_save=bool(async_save),
                          rank=-1 if rank is None else rank,
                          world_size=0 if world_size is None else world_size)
        self._ck = None          # the save handle, planned on the first save
        self._plan = None        # what it registered: (name, ptr, dtype, shape)
        self._meta = None        # its meta tensor
        self._closed = False
        probe = self._open()     # fails now, not at the first save, on a bad dir
        self.dir = probe.dir
        self.rank = self._opts["rank"] if self._opts["rank"] >= 0 else _firebreak.rank()
        self.world_size = (self._opts["world_size"] if self._opts["world_size"] > 0
                           else _firebreak.world_size())
        probe.close()

    # -- helpers --------------------------------------------------------

    def _open(self):
        opts = {k: v for k, v in self._opts.items() if v is not None}
        return _firebreak.Ckpt(**opts)

    def _check_open(self):
        if self._closed:
            raise ValueError("Checkpointer is closed")

    def _flatten(self):
        """(skeleton, {name: tensor}) of the live state."""
        tensors = {}
        skeleton = {}
        for key, obj in self.state.items():
            if isinstance(obj, torch.Tensor):
                skeleton[key] = ("tensor", _strip(obj, [key], tensors))
            else:
                skeleton[key] = ("state_dict", _strip(obj.state_dict(), [key], tensors))
        for name, t in tensors.items():
            _check_tensor(name, t)
        return skeleton, tensors

    def _meta_bytes(self, step, skeleton):
        meta = {"format": META_FORMAT, "step": step, "objects": skeleton,
                "rng": _rng_state(), "extra": self.extra}
        try:
            data = pickle.dumps(meta, protocol=4)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise TypeError("extra or a state dict holds a value that cannot be "
                            "checkpointed: %s" % e) from None
        try:   # what restore could not read must fail the save, not the restore
            _safe_loads(data)
        except pickle.UnpicklingError as e:
            raise TypeError("extra or a state dict holds a value that cannot be "
                            "checkpointed: %s" % e) from None
        return data

    # -- API --------------------------------------------------------------

    def save(self, step):
        """Checkpoint the state as step `step`.  Returns after the snapshot;
        the shard is hashed and written in the background.  A save while the
        previous one is persisting waits for it."""
        self._check_open()
        step = int(step)
        if step < 0:
            raise ValueError("step %d: expected >= 0" % step)
        skeleton, tensors = self._flatten()
        data = self._meta_bytes(step, skeleton)
        need = _META_HDR.size + len(data)
        plan = [(n, t.data_ptr(), t.dtype, tuple(t.shape)) for n, t in tensors.items()]
        if (self._ck is None or plan != self._plan or self._meta is None
                or self._meta.numel() < need):
            self._replan(tensors, plan, need)
        self._meta[:need] = torch.frombuffer(
            bytearray(_META_HDR.pack(b"FBPY", len(data)) + data), dtype=torch.uint8)
        return self._ck.save(step)

    def _replan(self, tensors, plan, meta_need):
        if self._ck is not None:
            ck, self._ck = self._ck, None
            ck.close()               # waits for its save in flight
        cap = 4096
        while cap < meta_need:
            cap *= 2
        meta = torch.zeros(cap, dtype=torch.uint8)
        ck = self._open()
        try:
            for name, t in tensors.items():
                ck.register(name, _DTYPES[t.dtype], tuple(t.shape), t.data_ptr(),
                            t.numel() * t.element_size(), t)
            ck.register(META, _firebreak.DTYPE_U8, (cap,), meta.data_ptr(), cap, meta)
        except BaseException:
            ck.close()
            raise
        self._ck, self._plan, self._meta = ck, plan, meta

    def wait(self):
        """Wait for the save in flight; raises firebreak.Error if it failed."""
        self._check_open()
        if self._ck is not None:
            self._ck.wait()

    def close(self):
        """Wait for the save in flight and release the handle."""
        if self._closed:
            return
        self._closed = True
        if self._ck is not None:
            ck, self._ck = self._ck, None
            ck.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def restore(self):
        """Load the newest checkpoint that verifies into the state, in place.
        Returns its step, or None when there is none (the state untouched)."""
        self._check_open()
        if self._ck is not None:
            self._ck.wait()          # the engine refuses to restore mid-save
        tried = set()
        while True:
            lay = _firebreak.layout(self.dir, self.rank, self.world_size)
            if lay is None:
                return None
            step, entries = lay
            if step in tried:
                raise Error(_firebreak.EMISMATCH,
                            "checkpoint step %d in %s could not be restored"
                            % (step, self.dir))
            tried.add(step)
            names = {n: (d, s) for n, d, s in entries}
            if META not in names:
                raise ValueError("checkpoint step %d in %s has no %s: not written "
                                 "by firebreak.Checkpointer" % (step, self.dir, META))
            bufs = {}
            ck = self._open()
            try:
                for n, d, s in entries:
                    if d not in _TORCH_OF:
                        raise TypeError("checkpoint step %d: tensor %s has a dtype "
                                        "torch cannot hold here" % (step, n))
                    t = torch.empty(s, dtype=_TORCH_OF[d])
                    bufs[n] = t
                    ck.register(n, d, s, t.data_ptr(), t.numel() * t.element_size(), t)
                try:
                    got = ck.restore()
                except Error as e:
                    if e.args[0] == _firebreak.EMISMATCH:
                        continue   # fell back to an older checkpoint: ask again
                    raise
            finally:
                ck.close()
            if got is None:
                return None
            self._load(got, bufs)
            return got

    def _load(self, step, bufs):
        raw = bufs.pop(META).numpy().tobytes()
        magic, length = _META_HDR.unpack_from(raw)
        if magic != b"FBPY" or length > len(raw) - _META_HDR.size:
            raise ValueError("checkpoint step %d: %s is malformed" % (step, META))
        meta = _safe_loads(raw[_META_HDR.size:_META_HDR.size + length])
        if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
            raise ValueError("checkpoint step %d: meta format %r, expected %d"
                             % (step, meta.get("format") if isinstance(meta, dict)
                                else None, META_FORMAT))
        objects = meta["objects"]
        # Check everything against the live state before changing any of it.
        if set(objects) != set(self.state):
            raise ValueError("checkpoint step %d holds state %s; the program's "
                             "state is %s" % (step, sorted(objects), sorted(self.state)))
        _, live = self._flatten()
        lazy = tuple("%s/state/" % k for k, o in self.state.items()
                     if isinstance(o, torch.optim.Optimizer))
        for name, t in live.items():
            if name not in bufs:
                raise ValueError("tensor %s: in the program's state, not in checkpoint "
                                 "step %d (the state dict's keys changed)" % (name, step))
            b = bufs[name]
            if name.startswith(lazy):
                continue  # optimizer state is replaced, not copied into
            if b.shape != t.shape or b.dtype != t.dtype:
                raise ValueError("tensor %s: the program has %s %s, checkpoint step "
                                 "%d has %s %s" % (name, t.dtype, tuple(t.shape), step,
                                                   b.dtype, tuple(b.shape)))
        for name in bufs:
            if name not in live and not name.startswith(lazy):
                raise ValueError("tensor %s: in checkpoint step %d, not in the "
                                 "program's state (the state dict's keys changed)"
                                 % (name, step))
        with torch.no_grad():
            for key, obj in self.state.items():
                kind, sk = objects[key]
                value = _fill(sk, bufs)
                if isinstance(obj, torch.Tensor):
                    obj.copy_(value)
                else:
                    obj.load_state_dict(value)
        _set_rng_state(meta["rng"])
        self.extra = meta["extra"]
