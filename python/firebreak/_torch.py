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
(_firebreak.layout) and its meta (one small verified read), checks them
against the live objects (names, dtypes, shapes, slice places), so a
mismatch raises before anything changed, and then has the engine read the
shard straight into the program's own tensors: through the save handle
when it holds exactly those tensors (each piece copied aside into its
staging before it is overwritten and put back if any hash fails), else
through a synchronous handle that verifies the whole shard before it
writes a byte; either way no mixed state.  Only what the program lacks (optimizer state it
creates lazily, device tensors, tensors sharing memory) goes into new
tensors, on huge pages, loaded with load_state_dict / copy_.  The meta is unpickled with an allow-list (plain Python values,
OrderedDict), never arbitrary classes.

Replicated state (a DDP model and its optimizer, or what the user names)
is written once per group: each such tensor is assigned to one member,
balanced by bytes, and only that rank registers it; the meta records the
owners.  Restore reads it from the owner's shard (_firebreak.open_layout,
the engine's reader across shards, verified before anything is copied).
Sharded state (firebreak.Slice, DTensor) is registered with its global
shape and offset; on another world size restore reads each rank's new
slice from the overlapping old ones, and refuses per-rank state naming
both world sizes.
"""
import copy
import hashlib
import io
import itertools
import mmap
import os
import pickle
import random
import re
import struct
import sys
import warnings

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
# Newer torch has more of the format's dtypes (unsigned, float8).
for _name, _code in (("uint16", "DTYPE_U16"), ("uint32", "DTYPE_U32"),
                     ("uint64", "DTYPE_U64"), ("float8_e5m2", "DTYPE_F8_E5M2"),
                     ("float8_e4m3fn", "DTYPE_F8_E4M3")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = getattr(_firebreak, _code)
_TORCH_OF = {v: k for k, v in _DTYPES.items()}


_HUGE_BYTES = 2 << 20
_OWN_MAPPING_BYTES = 4 << 20


def _empty(shape, dtype):
    """A new tensor for restored bytes the program has no tensor for yet
    (optimizer state it creates lazily).  From 4 MiB up, on a mapping of
    its own, 2 MiB-aligned and advised MADV_HUGEPAGE before any page is
    touched, so the engine's reading threads fault it in 2 MiB at a time:
    torch.empty's 4 KiB pages cost seconds of faults per GiB on a virtual
    machine.  The mapping lives as long as the tensor's storage."""
    numel = 1
    for x in shape:
        numel *= x
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if nbytes < _OWN_MAPPING_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=dtype)
    # private: a shared anonymous mapping is shmem, which the
    # transparent huge page setting for anonymous memory does not cover
    m = mmap.mmap(-1, nbytes + _HUGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = torch.frombuffer(m, dtype=torch.uint8)
    off = -raw.data_ptr() % _HUGE_BYTES
    try:
        m.madvise(mmap.MADV_HUGEPAGE, off, nbytes)
    except OSError:
        pass   # advisory: transparent huge pages may be off
    return raw[off:off + nbytes].view(dtype).view(shape)


class _TensorRef(str):
    """Where a tensor was in a pickled state dict: its checkpoint name.  A
    str: pickled as the class and the name, and unpickled by str's own
    constructor, with no Python code run per tensor (every save checks its
    meta by unpickling it).  Metas of earlier versions, which call
    _TensorRef(name), load the same."""
    __slots__ = ()

    @property
    def name(self):
        return str.__str__(self)


class _ShardedRef(_TensorRef):
    """A ShardedTensor (FSDP1's sharded state dict) in a pickled state dict."""
    __slots__ = ()
    empty = False


class _EmptyShardedRef(_ShardedRef):
    """A ShardedTensor of which the saving rank had no local shard (then
    nothing of it is in that rank's shard)."""
    __slots__ = ()
    empty = True


class Slice:
    """A tensor that is this rank's part of a global tensor: `tensor` sits
    at `global_offset` in a tensor of `global_shape` that the ranks hold
    between them.  Put it in the Checkpointer's state like a tensor:

        state = {"emb": firebreak.Slice(local, (vocab, dim), (rank * rows, 0))}

    Saved with its place (fb_ckpt_register_slice); restored in place, and on
    another world size from the slices that overlap it."""
    __slots__ = ("tensor", "global_shape", "global_offset")

    def __init__(self, tensor, global_shape, global_offset):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError("Slice: expected a tensor, got %s" % type(tensor).__name__)
        gs, go = tuple(int(x) for x in global_shape), tuple(int(x) for x in global_offset)
        if len(gs) != tensor.dim() or len(go) != tensor.dim():
            raise ValueError("Slice: a tensor of %d dimensions, global shape %s, "
                             "offset %s" % (tensor.dim(), gs, go))
        for d in range(tensor.dim()):
            if go[d] < 0 or go[d] + tensor.shape[d] > gs[d]:
                raise ValueError("Slice: %d elements at offset %d do not fit the "
                                 "global size %d of dimension %d"
                                 % (tensor.shape[d], go[d], gs[d], d))
        self.tensor, self.global_shape, self.global_offset = tensor, gs, go


def _dtensor_type():
    # Any failure means no DTensor: torch 1.13's distributed modules do not
    # all import under Python 3.11 (ValueError from a dataclass).
    try:
        from torch.distributed.tensor import DTensor
        return DTensor
    except Exception:
        try:
            from torch.distributed._tensor import DTensor
            return DTensor
        except Exception:
            return None


_DTensor = _dtensor_type()


def _dtensor_place(dt):
    """(local tensor, global shape, global offset) of a DTensor."""
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:
        from torch.distributed._tensor._utils import compute_local_shape_and_global_offset
    local = dt.to_local()
    _, off = compute_local_shape_and_global_offset(dt.shape, dt.device_mesh, dt.placements)
    return local, tuple(dt.shape), tuple(int(x) for x in off)


def _dtensor_shards(dt):
    """Every distinct shard of a DTensor over its mesh: [(global offset,
    local shape, [global ranks holding it])], the ranks that hold the same
    shard being those whose mesh coordinates differ only on dimensions
    where it is replicated.  None where it cannot be worked out here (a
    torch without the helper, a Partial placement, this rank's own shard
    not as torch computes it): then every holder writes its copy."""
    try:
        from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
    except ImportError:
        try:
            from torch.distributed._tensor._utils import (
                _compute_local_shape_and_global_offset)
        except ImportError:
            return None
    mesh, placements = dt.device_mesh, tuple(dt.placements)
    if any(p.is_partial() for p in placements):
        return None
    ranks = mesh.mesh.tolist()
    shape, dims = tuple(dt.shape), tuple(mesh.mesh.shape)
    shards = {}
    for coord in itertools.product(*(range(n) for n in dims)):
        try:
            local, off = _compute_local_shape_and_global_offset(
                shape, dims, list(coord), placements)
        except Exception:
            return None
        r = ranks
        for c in coord:
            r = r[c]
        key = (tuple(int(x) for x in off), tuple(int(x) for x in local))
        shards.setdefault(key, []).append(int(r))
    return [(off, local, sorted(holders)) for (off, local), holders in shards.items()]


def _sharded_tensor_type():
    try:
        from torch.distributed._shard.sharded_tensor import ShardedTensor
        return ShardedTensor
    except Exception:   # 1.13 under Python 3.11: the import fails
        return None


_ShardedTensor = _sharded_tensor_type()


def _fsdp1_type():
    """FSDP1's FullyShardedDataParallel, or None where it does not import
    (torch 1.13 under Python 3.11)."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
        return FullyShardedDataParallel
    except Exception:
        return None


def _sharded_like(t, live):
    """A ShardedTensor with `t` as its local shard (none when `live` has
    none), placed and described as the program's ShardedTensor `live`."""
    from torch.distributed._shard.sharded_tensor import Shard as _Shard
    shards = [_Shard(t, live.local_shards()[0].metadata)] if live.local_shards() else []
    return _ShardedTensor._init_from_local_shards_and_global_metadata(
        shards, live.metadata(), process_group=live._process_group)


class _no_tensor_deepcopy:
    """While loading an optimizer: torch before 2.x deep-copies the state
    dict it is given (Optimizer.load_state_dict), a second copy of every
    moment.  The tensors restore gives it are its own (allocated for the
    restore, referenced by nothing else), so they are handed over as they
    are: the module's deepcopy sees them in its memo.  Containers are still
    copied.  A torch without that deepcopy (2.x copies shallowly) is left
    alone."""

    def __init__(self, value):
        self.tensors = []
        _collect_tensors(value, self.tensors)
        self.mod = self.saved = None

    def __enter__(self):
        import torch.optim.optimizer as mod
        if getattr(mod, "deepcopy", None) is copy.deepcopy and self.tensors:
            keep = {id(t): t for t in self.tensors}

            def deepcopy(obj, memo=None):
                memo = dict(keep) if memo is None else memo
                return copy.deepcopy(obj, memo)
            self.mod, self.saved = mod, mod.deepcopy
            mod.deepcopy = deepcopy
        return self

    def __exit__(self, *exc):
        if self.mod is not None:
            self.mod.deepcopy = self.saved


def _own_tensors(module, value):
    """value (a state dict for module) with every tensor that is the very
    memory of the module's parameter or buffer of that key (restored into
    it in place) replaced by that parameter or buffer, whose copy_ onto
    itself torch skips; torch 1.13 copies a detached alias onto itself,
    byte for byte."""
    if not isinstance(value, dict):
        return value
    own = dict(module.named_parameters())
    own.update(module.named_buffers())
    new = copy.copy(value)      # keeps the type and _metadata
    for k, v in value.items():
        p = own.get(k)
        # plain tensors only: a DTensor (FSDP2) has no storage of its own
        # and every one reports data_ptr 0
        if (type(v) is torch.Tensor and type(p) in (torch.Tensor, torch.nn.Parameter)
                and v.data_ptr() != 0 and p.data_ptr() == v.data_ptr()
                and p.dtype == v.dtype and p.shape == v.shape
                and p.stride() == v.stride() and p.device == v.device):
            new[k] = p
    return new


def _collect_tensors(obj, out):
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _collect_tensors(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _collect_tensors(v, out)


def _ddp_type():
    try:
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel
    except ImportError:  # pragma: no cover
        return None


def _group_members(group, world_size):
    """The global ranks of a process group, in order (None: the world)."""
    if group is None:
        return list(range(world_size))
    import torch.distributed as dist
    if hasattr(dist, "get_process_group_ranks"):
        return list(dist.get_process_group_ranks(group))
    from torch.distributed import distributed_c10d as c10d
    return sorted(c10d._pg_group_ranks[group])


class _SafeUnpickler(pickle.Unpickler):
    """Plain values only: a checkpoint must not be able to run code."""
    _ALLOWED = {("collections", "OrderedDict"), ("builtins", "set"),
                ("builtins", "frozenset"), ("builtins", "complex"),
                ("builtins", "slice"), ("builtins", "range"),
                ("firebreak._torch", "_TensorRef"),
                ("firebreak._torch", "_ShardedRef"),
                ("firebreak._torch", "_EmptyShardedRef")}

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            if module == "firebreak._torch":
                return {"_TensorRef": _TensorRef, "_ShardedRef": _ShardedRef,
                        "_EmptyShardedRef": _EmptyShardedRef}[name]
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            "checkpoint meta refers to %s.%s: only plain Python values "
            "(numbers, strings, bytes, lists, tuples, dicts, sets) are stored"
            % (module, name))


def _safe_loads(data):
    return _SafeUnpickler(io.BytesIO(data)).load()


_NAME_PART = re.compile(r"[\x21-\x2e\x30-\x7e]+\Z")   # printable, no space or /


def _name_part(key, where):
    s = key if type(key) is str else str(key)
    if not _NAME_PART.match(s):
        raise ValueError("%s: key %r: checkpoint names are printable ASCII "
                         "without spaces or '/'" % (where, key))
    return s


def _strip(obj, path, out, places=None, dtensors=None):
    """obj with every tensor replaced by a _TensorRef; out[name] = tensor
    (a DTensor's or Slice's local part), places[name] = (global shape,
    offset) of slices, dtensors[name] = the DTensor."""
    if isinstance(obj, (torch.Tensor, Slice)):
        name = "/".join(path)
        if name in out:
            raise ValueError("tensor %s: two tensors map to this name" % name)
        if isinstance(obj, Slice):
            out[name] = obj.tensor
            places[name] = (obj.global_shape, obj.global_offset)
        elif _ShardedTensor is not None and isinstance(obj, _ShardedTensor):
            shards = obj.local_shards()
            if len(shards) > 1:
                raise ValueError("tensor %s: a ShardedTensor with %d local shards on "
                                 "this rank; expected at most one (as FSDP's sharded "
                                 "state dict has)" % (name, len(shards)))
            dtensors[name] = obj
            if not shards:
                return _EmptyShardedRef(name)
            out[name] = shards[0].tensor
            places[name] = (tuple(int(x) for x in obj.size()),
                            tuple(int(x) for x in shards[0].metadata.shard_offsets))
            return _ShardedRef(name)
        elif _DTensor is not None and isinstance(obj, _DTensor):
            local, gs, go = _dtensor_place(obj)
            out[name] = local
            places[name] = (gs, go)
            dtensors[name] = obj
        else:
            out[name] = obj
        return _TensorRef(name)
    if isinstance(obj, dict):
        new = copy.copy(obj)   # keeps the type and e.g. _metadata
        for k, v in obj.items():
            new[k] = _strip(v, path + [_name_part(k, "/".join(path))], out, places,
                            dtensors)
        return new
    if isinstance(obj, (list, tuple)):
        items = [_strip(v, path + [str(i)], out, places, dtensors)
                 for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _place_key(place):
    """A slice's (global shape, offset) as tuples of ints, None for a whole
    tensor: the same whether it came from the state or a shard's header."""
    if place is None or place[0] is None:
        return None
    return tuple(int(x) for x in place[0]), tuple(int(x) for x in place[1])


def _fill(obj, tensors, dtensors):
    """The inverse of _strip, with the tensors restored (a DTensor's local
    part wrapped again like the program's DTensor of that name)."""
    if isinstance(obj, _TensorRef):
        live = dtensors.get(obj.name)
        if _ShardedTensor is not None and isinstance(live, _ShardedTensor):
            # this rank's part as the program has it (none: an empty one)
            return _sharded_like(tensors.get(obj.name), live)
        t = tensors[obj.name]
        if live is not None:
            return _DTensor.from_local(t, live.device_mesh, live.placements,
                                       run_check=False, shape=live.shape,
                                       stride=live.stride())
        return t
    if isinstance(obj, dict):
        new = copy.copy(obj)
        for k, v in obj.items():
            new[k] = _fill(v, tensors, dtensors)
        return new
    if isinstance(obj, list):
        return [_fill(v, tensors, dtensors) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_fill(v, tensors, dtensors) for v in obj)
    return obj


def _refs(obj, out, empty=False):
    """Every _TensorRef name in a skeleton (with empty: also those of
    ShardedTensors of which the saving rank had no local shard)."""
    if isinstance(obj, _TensorRef):
        if empty or not isinstance(obj, _EmptyShardedRef):
            out.append(obj.name)
    elif isinstance(obj, dict):
        for v in obj.values():
            _refs(v, out, empty)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _refs(v, out, empty)
    return out


def _check_tensor(name, t):
    if t.device.type == "cuda" and not _firebreak.DEVICE_SUPPORT:
        raise ValueError("tensor %s: on %s; this build of firebreak has no CUDA "
                         "path (built without the CUDA toolkit): expected a CPU "
                         "tensor" % (name, t.device))
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError("tensor %s: on %s; expected a CPU or CUDA tensor"
                         % (name, t.device))
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


def _process_group():
    """(rank, world size) of torch.distributed's default group when it is
    initialized, else (None, None): ranks started by torch.multiprocessing
    have no RANK in their environment, and the engine reads that."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except (ImportError, RuntimeError):
        pass
    return None, None


def _default_dir():
    # Under the supervisor the engine picks FIREBREAK_CKPT_DIR, else
    # <run_dir>/checkpoints (dir=None); without it, ./checkpoints.
    return None if _firebreak.attached() else "checkpoints"


from ._args import STEP_MAX, _whole  # noqa: E402  (torch-free: firebreak.step uses them)
_STEP_NAME = re.compile(r"step-([0-9]{10,19})")  # a step directory (dcp.py too)


def _groups_text(lens):
    """[2] -> "1 group of 2 parameters"; [2, 3] -> "2 groups of 2, 3
    parameters"."""
    return "%d group%s of %s parameter%s" % (
        len(lens), "" if len(lens) == 1 else "s",
        ", ".join("?" if n < 0 else str(n) for n in lens),
        "" if lens == [1] else "s")


class Checkpointer:
    """Saves and restores `state` (a dict of objects with state_dict() and
    load_state_dict(), tensors, or firebreak.Slice), the RNG states and
    `extra` (small plain-Python user state, e.g. a data position) as
    firebreak checkpoints.

    dir: the checkpoint directory; default the supervisor's, else
    ./checkpoints.  keep: newest complete checkpoints kept.  snapshot:
    "auto", "copy" or "protect" (docs/checkpoint.md).

    replicated: which entries of `state` are the same on every rank of
    `group` and so written once per group, each tensor by one member: None
    (default) picks the DistributedDataParallel values and the optimizers
    of their parameters; True all of `state`; False none; or a collection
    of keys.  group: the torch.distributed group they are replicated over
    (default: the whole world).
    """

    def __init__(self, state, extra=None, dir=None, keep=2, snapshot="auto",
                 async_save=True, rank=None, world_size=None, replicated=None,
                 group=None):
        if isinstance(state, (str, bytes, os.PathLike)):
            raise TypeError("state: got a path, %r: the state comes first and the "
                            "directory is dir=, as in Checkpointer({'model': model}, "
                            "dir=%r)" % (state, state))
        if not isinstance(state, dict) or not state:
            raise TypeError("state: expected a non-empty dict of objects with "
                            "state_dict()/load_state_dict(), or tensors")
        for key, obj in state.items():
            _name_part(key, "state")
            if not isinstance(obj, (torch.Tensor, Slice)) and not (
                    hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError("state[%r]: %s has no state_dict()/load_state_dict() "
                                "and is not a tensor" % (key, type(obj).__name__))
        keep = _whole(keep, "keep", 1, 1 << 20)
        rank = None if rank is None else _whole(rank, "rank", 0, (1 << 31) - 1)
        world_size = (None if world_size is None
                      else _whole(world_size, "world_size", 1, (1 << 31) - 1))
        if not isinstance(async_save, (bool, int)) or async_save not in (0, 1):
            raise TypeError("async_save: expected True or False, got %r" % (async_save,))
        snaps = {"auto": _firebreak.SNAPSHOT_AUTO, "copy": _firebreak.SNAPSHOT_COPY,
                 "protect": _firebreak.SNAPSHOT_PROTECT}
        if snapshot not in snaps:
            raise ValueError("snapshot %r: expected auto, copy or protect" % snapshot)
        self.state = state
        self.extra = {} if extra is None else extra
        if dir is None:
            dir = _default_dir()
        # absolute now: a later os.chdir must not move the checkpoints
        dir = os.path.abspath(os.fspath(dir)) if dir is not None else None
        self._opts = dict(dir=dir,
                          keep=keep, snapshot=snaps[snapshot],
                          async_save=bool(async_save),
                          rank=-1 if rank is None else rank,
                          world_size=0 if world_size is None else world_size)
        self._ck = None          # the save handle, planned on the first save
        self._plan = None        # what it registered: {name: (ptr, dtype, shape, place)}
        self._from_restore = False   # _ck made by restore, no save through it yet
        self._meta = None        # its meta tensor
        self._closed = False
        self._newest = None      # the newest step restored or saved through it
        self._restored = None    # the step restore() loaded
        self._older_said = False
        probe = self._open()     # fails now, not at the first save, on a bad dir
        self.dir = probe.dir
        pg_rank, pg_world = _process_group()
        self.rank = (self._opts["rank"] if self._opts["rank"] >= 0
                     else pg_rank if pg_rank is not None else _firebreak.rank())
        self.world_size = (self._opts["world_size"] if self._opts["world_size"] > 0
                           else pg_world if pg_world is not None
                           else _firebreak.world_size())
        probe.close()
        # The handles opened from now on: the same rank and size (the
        # engine alone would read them from the environment).
        self._opts["rank"], self._opts["world_size"] = self.rank, self.world_size
        # FSDP1 modules: saved and loaded as sharded state dicts (their
        # ShardedTensors), and so are the optimizers of their parameters
        # (FSDP.optim_state_dict / optim_state_dict_to_load)
        self._fsdp1, self._fsdp1_optim = {}, {}
        fsdp = _fsdp1_type()
        if fsdp is not None:
            for k, o in state.items():
                if isinstance(o, fsdp):
                    self._fsdp1[k] = o
            for k, o in state.items():
                if not isinstance(o, torch.optim.Optimizer):
                    continue
                mine = {id(p) for g in o.param_groups for p in g["params"]}
                for m in self._fsdp1.values():
                    if mine and mine <= {id(p) for p in m.parameters()}:
                        self._fsdp1_optim[k] = m
        self._replicated = self._replicated_keys(replicated)
        self._group = group
        self._members = None
        # DTensor shards replicated over a mesh dimension: written once
        # unless replicated=False
        self._dedup_dtensors = replicated is not False
        self._dt_plan = None
        if self._replicated:
            self._members = _group_members(group, self.world_size)
            if self.rank not in self._members:
                raise ValueError("group: this rank (%d) is not one of its members %s"
                                 % (self.rank, self._members))
        self.last_save_bytes = 0  # bytes this rank registered at the last save

    def _replicated_keys(self, replicated):
        if replicated is True:
            return set(self.state)
        if replicated is False:
            return set()
        if replicated is not None:
            keys = set(replicated)
            for k in keys:
                if k not in self.state:
                    raise ValueError("replicated: %r is not a key of state %s"
                                     % (k, sorted(self.state)))
            return keys
        ddp = _ddp_type()
        # an FSDP1 optimizer's plain tensors (step) are the same on every
        # rank; the rest of it is sharded
        keys, params = set(self._fsdp1_optim), set()
        for k, o in self.state.items():
            if ddp is not None and isinstance(o, ddp):
                keys.add(k)
                params.update(id(p) for p in o.parameters())
        for k, o in self.state.items():
            if not isinstance(o, torch.optim.Optimizer):
                continue
            mine = [p for g in o.param_groups for p in g["params"]]
            if params and mine and all(id(p) in params for p in mine):
                keys.add(k)
            # FSDP2 / DTensor parameters: their state is sharded like them
            # (slices), and the plain tensors beside it (AdamW's step) are
            # the same on every rank
            elif _DTensor is not None and mine and all(isinstance(p, _DTensor)
                                                      for p in mine):
                keys.add(k)
        return keys

    def _fsdp1_module(self, key):
        return self._fsdp1[key] if key in self._fsdp1 else self._fsdp1_optim.get(key)

    def _state_dict(self, key, obj):
        m = self._fsdp1_module(key)
        if m is None:
            return obj.state_dict()
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
        with FSDP.state_dict_type(m, StateDictType.SHARDED_STATE_DICT):
            return obj.state_dict() if key in self._fsdp1 else FSDP.optim_state_dict(m, obj)

    def _load_state_dict(self, key, obj, value):
        m = self._fsdp1_module(key)
        if m is None:
            if isinstance(obj, torch.optim.Optimizer):
                with _no_tensor_deepcopy(value):
                    obj.load_state_dict(value)
            else:
                if isinstance(obj, torch.nn.Module):
                    value = _own_tensors(obj, value)
                obj.load_state_dict(value)
            return
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
        with FSDP.state_dict_type(m, StateDictType.SHARDED_STATE_DICT):
            if key in self._fsdp1:
                obj.load_state_dict(value)
            else:
                obj.load_state_dict(FSDP.optim_state_dict_to_load(m, obj, value))

    def _init_fsdp1_optim(self):
        """Create the state of FSDP1 optimizers that have none yet (a step
        with zero gradients and learning rate, as torch.distributed.
        checkpoint does), so their sharded state has a place to load into.
        Only when there is a checkpoint to restore."""
        for key in self._fsdp1_optim:
            o = self.state[key]
            if o.state:
                continue
            from torch.distributed.checkpoint.state_dict import _init_optim_state
            _init_optim_state(o)

    def _param_of(self, name):
        """The parameter whose optimizer state `name` is
        ("optim/state/3/exp_avg": parameter 3 in param_groups order, as
        torch numbers them), or None."""
        parts = name.split("/")
        opt = self.state.get(parts[0])
        if (len(parts) < 4 or parts[1] != "state" or not parts[2].isdigit()
                or not isinstance(opt, torch.optim.Optimizer)):
            return None
        params = [p for g in opt.param_groups for p in g["params"]]
        i = int(parts[2])
        return params[i] if i < len(params) else None

    def _state_template(self, name, gshape):
        """For optimizer state of a DTensor parameter that the program has
        not created yet (lazily, at the first step): the parameter, whose
        sharding the state has.  None when there is none."""
        p = self._param_of(name)
        if _DTensor is None or not isinstance(p, _DTensor) or tuple(p.shape) != tuple(gshape):
            return None
        return p

    # -- helpers --------------------------------------------------------

    def _open(self, **override):
        opts = {k: v for k, v in dict(self._opts, **override).items() if v is not None}
        return _firebreak.Ckpt(**opts)

    def _check_open(self):
        if self._closed:
            raise ValueError("Checkpointer is closed")

    def _flatten(self):
        """(skeleton, {name: tensor}, {name: (global shape, offset)},
        {name: DTensor}) of the live state."""
        tensors, places, dtensors = {}, {}, {}
        skeleton = {}
        for key, obj in self.state.items():
            if isinstance(obj, (torch.Tensor, Slice)):
                skeleton[key] = ("tensor", _strip(obj, [key], tensors, places, dtensors))
            else:
                skeleton[key] = ("state_dict", _strip(self._state_dict(key, obj), [key],
                                                      tensors, places, dtensors))
        for name, t in tensors.items():
            _check_tensor(name, t)
        return skeleton, tensors, places, dtensors

    def _owners(self, tensors, places, dtensors):
        """({name: owning global rank}, {name: owner} of the plain replicated
        tensors alone).  Plain replicated tensors: the largest first, each
        to the member of the group with the fewest bytes so far (the lowest
        rank among equals), so every member writes about 1/N of the bytes;
        the same on every member, as it depends on names and sizes only.
        A DTensor replicated on a mesh dimension: each distinct shard to one
        of the ranks holding it, balanced the same way over the DTensors of
        one mesh (every rank of a mesh holds all of its DTensors), so each
        is written once; this rank's entry is the owner of its shard."""
        owners = {}
        if self._replicated:
            names = [n for n in tensors if n.split("/", 1)[0] in self._replicated
                     and n not in places]
            names.sort(key=lambda n: (-tensors[n].numel() * tensors[n].element_size(), n))
            load = [0] * len(self._members)
            for n in names:
                i = min(range(len(load)), key=lambda k: (load[k], k))
                owners[n] = self._members[i]
                load[i] += tensors[n].numel() * tensors[n].element_size()
        plain = dict(owners)
        if self._dedup_dtensors and dtensors:
            owners.update(self._dtensor_owners(tensors, places, dtensors))
        return owners, plain

    def _dtensor_owners(self, tensors, places, dtensors):
        dtensors = {n: d for n, d in dtensors.items() if isinstance(d, _DTensor)}
        if not dtensors:
            return {}
        key = tuple((n, tuple(dt.shape), tuple(dt.placements), id(dt.device_mesh),
                     tensors[n].element_size()) for n, dt in sorted(dtensors.items()))
        if self._dt_plan is not None and self._dt_plan[0] == key:
            return self._dt_plan[1]
        by_mesh = {}
        for n, dt in sorted(dtensors.items()):
            shards = _dtensor_shards(dt)
            mine = places[n][1]
            if (shards is None or not any(off == mine for off, _, _ in shards)
                    or all(len(h) == 1 for _, _, h in shards)):
                continue
            esize = tensors[n].element_size()
            group = by_mesh.setdefault(tuple(dt.device_mesh.mesh.flatten().tolist()), [])
            for off, local, holders in shards:
                nbytes = esize
                for x in local:
                    nbytes *= x
                group.append((-nbytes, n, off, holders, off == mine))
        owners = {}
        for items in by_mesh.values():
            items.sort(key=lambda it: it[:3])
            load = {}
            for negb, n, off, holders, mine in items:
                r = min(holders, key=lambda k: (load.get(k, 0), k))
                load[r] = load.get(r, 0) - negb
                if mine:
                    owners[n] = r
        self._dt_plan = (key, owners)
        return owners

    def _check_group(self, step, owners, tensors):
        """Every member saves the same step with the same replicated tensors
        (else some tensor would be written by nobody): one all_gather of
        (step, digest) over the group, when torch.distributed is up."""
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()) or len(self._members) < 2:
            return
        h = hashlib.sha256(repr(sorted((n, str(tensors[n].dtype), tuple(tensors[n].shape))
                                       for n in owners)).encode()).digest()
        mine = torch.tensor([step, int.from_bytes(h[:7], "little")], dtype=torch.int64)
        if dist.get_backend(self._group) == "nccl":
            mine = mine.cuda()
        got = [torch.zeros_like(mine) for _ in self._members]
        dist.all_gather(got, mine, group=self._group)
        for m, g in zip(self._members, got):
            if int(g[0]) != step or int(g[1]) != int(mine[1]):
                raise ValueError(
                    "replicated state: rank %d saves step %d with replicated tensors "
                    "%s those of rank %d (step %d); every rank of the group must "
                    "save the same steps of the same replicated state"
                    % (m, int(g[0]), "other than" if int(g[1]) != int(mine[1])
                       else "like", self.rank, step))

    def _meta_bytes(self, step, skeleton, owners, places):
        meta = {"format": META_FORMAT, "step": step, "objects": skeleton,
                "rng": _rng_state(), "extra": self.extra,
                "world_size": self.world_size, "replicated": owners,
                "members": self._members if owners else None,
                "slices": sorted(places)}
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
        step = _whole(step, "step", 0)
        skeleton, tensors, places, dtensors = self._flatten()
        owners, plain = self._owners(tensors, places, dtensors)
        if plain:
            self._check_group(step, plain, tensors)
        mine = {n: t for n, t in tensors.items()
                if owners.get(n, self.rank) == self.rank}
        # sharded: slices, DTensors, ShardedTensors (also with no local shard)
        data = self._meta_bytes(step, skeleton, owners, set(places) | set(dtensors))
        need = _META_HDR.size + len(data)
        plan = {n: (t.data_ptr(), t.dtype, tuple(t.shape), _place_key(places.get(n)))
                for n, t in mine.items()}
        if (self._ck is None or plan != self._plan or self._meta is None
                or self._meta.numel() < need):
            self._replan(mine, places, plan, need)
        self._meta[:need] = torch.frombuffer(
            bytearray(_META_HDR.pack(b"FBPY", len(data)) + data), dtype=torch.uint8)
        self.last_save_bytes = sum(t.numel() * t.element_size() for t in mine.values())
        self._from_restore = False
        ok = self._ck.save(step)
        self._step_goes_forward(step)   # a refused save is no step saved
        return ok

    def _step_goes_forward(self, step):
        """A save older than the step restored or saved before: a restart
        restores that newer one, not this state, and retention may delete
        this one at once.  Warned once (under the supervisor, it says so on
        the console instead: docs/checkpoint.md, "Steps")."""
        newest = self._newest
        self._newest = step if newest is None else max(newest, step)
        if newest is None or step >= newest or self._older_said or _firebreak.attached():
            return
        self._older_said = True
        warnings.warn("firebreak.Checkpointer: saving step %d, older than step %d that "
                      "it %s: a restart restores %d, not this state, and retention may "
                      "delete %d at once; does the script count its steps from 0 after "
                      "restore()?" % (step, newest, "restored" if self._restored == newest
                                      else "saved", newest, step),
                      RuntimeWarning, stacklevel=3)

    def _replan(self, tensors, places, plan, meta_need):
        self._drop_save_handle()
        cap = 4096
        while cap < meta_need:
            cap *= 2
        meta = torch.zeros(cap, dtype=torch.uint8)
        ck = self._open()
        try:
            for name, t in tensors.items():
                gs, go = places.get(name, (None, None))
                ck.register(name, _DTYPES[t.dtype], tuple(t.shape), t.data_ptr(),
                            t.numel() * t.element_size(), t, gs, go)
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
        Returns its step, or None when there is none (the state untouched).
        A checkpoint saved by another number of ranks is resharded when all
        of its state is replicated or sharded, else refused naming both."""
        self._check_open()
        if self._ck is not None:
            self._ck.wait()          # the engine refuses to restore mid-save
        tried = set()
        max_step = None
        while True:
            lay = _firebreak.open_layout(self.dir, 0, max_step)
            if lay is None:
                if not tried:
                    self._say_none_complete()
                return None
            if self._fsdp1_optim:
                self._init_fsdp1_optim()
            want = lay.step
            try:
                if want in tried:
                    raise Error(_firebreak.EMISMATCH,
                                "checkpoint step %d in %s could not be restored"
                                % (want, self.dir))
                tried.add(want)
                if lay.world_size == self.world_size:
                    got = self._read_same(lay)
                else:
                    got = self._read_other(lay)
            finally:
                lay.close()
            if got is None:
                return None
            step, bufs, meta, own_rng = got
            if step is None:           # the engine fell back to a step holding
                continue               # other tensors: ask again
            if step != want:           # the engine fell back past `want`
                max_step = step
                continue
            self._load(step, bufs, meta, own_rng)
            from ._hooks import restored
            restored(step, self.dir)
            self._restored = step
            self._newest = step if self._newest is None else max(self._newest, step)
            return step

    def _say_none_complete(self):
        """No complete checkpoint to restore, though step directories are
        there (a crash in the first save, shards cut short or unreadable):
        restore() returns None, and says so, for None alone reads like a
        directory that never held one."""
        try:
            steps = [n for n in os.listdir(self.dir) if _STEP_NAME.fullmatch(n)]
        except OSError:
            return
        if steps:
            sys.stderr.write("firebreak: rank %d: no checkpoint in %s can be restored: "
                             "%d step director%s, none complete and readable "
                             "(`firebreak ckpt ls %s` lists them); starting from "
                             "the program's own state\n"
                             % (self.rank, self.dir, len(steps),
                                "y" if len(steps) == 1 else "ies", self.dir))

    @staticmethod
    def _alloc(entry):
        name, rank, d, shape, gs, go = entry
        if d not in _TORCH_OF:
            raise TypeError("tensor %s has a dtype torch cannot hold here" % name)
        return _empty(shape, _TORCH_OF[d])

    def _read_same(self, lay):
        """Saved by as many ranks: this rank's shard through the engine's
        restore (which verifies it, sets a corrupt one aside and falls
        back) straight into the program's tensors, once its meta and
        layout were checked against them; replicated tensors other ranks
        wrote, and what the program lacks, into new tensors.
        (step, bufs, meta, True), or None when nothing verifies; step None:
        ask again."""
        entries = [e for e in lay.tensors() if e[1] == self.rank]
        metas = [e for e in entries if e[0] == META]
        if not metas:
            raise ValueError("checkpoint step %d in %s has no %s: not written "
                             "by firebreak.Checkpointer" % (lay.step, self.dir, META))
        _, live, places, dtensors = self._flatten()
        if dtensors:
            # DTensor / ShardedTensor state: placed by _load (lazily
            # created state takes its parameter's sharding there)
            return self._read_fresh(lay, entries)
        me = metas[0]
        mbuf = self._alloc(me)
        try:
            lay.read([(META, self.rank, me[2], me[3], me[4], me[5], mbuf.data_ptr(),
                       mbuf.numel())])
        except Error:
            # a damaged shard: the engine's restore sets it aside and falls back
            return self._read_fresh(lay, entries)
        meta = self._parse_meta(lay.step, mbuf)
        saved = self._check_layout(lay, entries, meta, live, places)
        # Where the engine reads each tensor of this shard: the program's
        # own when it has it as saved, in host memory (a device tensor is
        # loaded by copy_ from a host one); a tensor sharing memory with one
        # already chosen (tied weights) gets a buffer of its own, since the
        # copy set aside before its bytes are overwritten would hold the
        # other's new bytes, not the old ones.
        into, spans = {}, []
        for e in entries:
            t = live.get(e[0])
            if (e[0] != META and t is not None and t.device.type == "cpu"
                    and t.dtype == _TORCH_OF.get(e[2])
                    and tuple(t.shape) == tuple(e[3]) and t.is_contiguous()):
                n = t.numel() * t.element_size()
                if n:
                    spans.append((t.data_ptr(), t.data_ptr() + n, e[0]))
                into[e[0]] = t
        spans.sort()
        end = 0
        for lo, hi, name in spans:
            if lo < end:
                del into[name]
            end = max(end, hi)
        for e in entries:
            if e[0] not in into:
                into[e[0]] = self._alloc(e)
        # Replicated tensors other ranks wrote, before anything of the
        # program is overwritten: a failure here leaves it as it was.
        bufs = {n: into[n] for n in into if n != META}
        reqs = []
        for n, e in saved.items():
            if n in bufs:
                continue
            t = bufs[n] = self._alloc(e)
            reqs.append((n, e[1], e[2], e[3], e[4], e[5], t.data_ptr(),
                         t.numel() * t.element_size()))
        if reqs:
            lay.read(reqs)
        if self._save_handle_fits(entries, into):
            # the save handle holds exactly these tensors, and its staging
            # (faulted in already) takes each piece's old bytes aside
            # before the engine overwrites it, to put them back if a hash
            # fails: one read
            into[META] = self._meta
            got = self._engine_restore(entries, into, self._ck)
        else:
            # a synchronous handle of its own: no staging to fault in
            # before the first byte is read (fresh memory costs up to
            # seconds per GiB on a VM whose host must back it first); the
            # engine reads into place each tensor whose bytes are zero (a
            # fresh optimizer's moments, the new tensors above: cleared
            # again if a hash fails), and the others once only to verify
            # them and, when every hash matched, again (from the page
            # cache) into place
            got = self._engine_restore(entries, into)
            if got == lay.step and self._opts["async_save"] and (
                    self._ck is None or self._from_restore):
                # no save yet: the save handle the first save needs, made
                # now with exactly the shard's tensors at the addresses
                # read into (the program's own, and the new ones _load
                # hands over), so that its staging is populated in the
                # background while the program gets to its first save
                self._plan_for_restore(entries, into, places)
        if got is False:
            return (None, None, None, None)   # another step: ask again
        if got is None or got != lay.step:
            # None: nothing verified and the program's tensors are as they
            # were; an older step: they hold it, and it is read again with
            # its own meta (the caller asks for it)
            return None if got is None else (got, None, None, None)
        meta = self._parse_meta(got, into[META])
        meta["_places"] = {e[0]: (tuple(e[4]), tuple(e[5])) for e in entries}
        for n in meta.get("slices", ()):
            if n in saved and n not in meta["_places"]:
                e = saved[n]
                meta["_places"][n] = (tuple(e[4]), tuple(e[5]))
        return got, bufs, meta, True

    def _engine_restore(self, entries, into, ck=None):
        """The engine's restore of this rank's shard into into[name]: each
        registered on a new synchronous handle, or ck (the save handle)
        as it is.  The step restored, None when nothing verifies, or
        False when the engine fell back to a step holding other tensors."""
        own = ck is None
        if own:
            ck = self._open(async_save=False)
        try:
            if own:
                for e in entries:
                    t = into[e[0]]
                    ck.register(e[0], e[2], e[3], t.data_ptr(),
                                t.numel() * t.element_size(), t, e[4], e[5])
            try:
                return ck.restore()
            except Error as err:
                if err.args[0] == _firebreak.EMISMATCH:
                    return False
                raise
        finally:
            if own:
                ck.close()

    def _save_handle_fits(self, entries, into):
        """The save handle registers exactly the shard's tensors, at the
        addresses restore reads them into, and a meta buffer of the
        shard's meta size (a restore after saves in this process)."""
        if self._ck is None or self._plan is None or self._meta is None:
            return False
        if len(self._plan) != len(entries) - 1:
            return False
        for e in entries:
            if e[0] == META:
                if tuple(self._meta.shape) != tuple(e[3]):
                    return False
            elif (self._plan.get(e[0], ())[:3]
                  != (into[e[0]].data_ptr(), into[e[0]].dtype, tuple(e[3]))):
                return False
        return True

    def _plan_for_restore(self, entries, into, places):
        """Make the save handle at restore, before any save, as save would:
        every tensor of the shard registered at into[name] (its staging
        mapped on huge pages and populated in the background from now on),
        with its place when the program has it as a slice (places), and
        into[META] as its meta buffer."""
        self._drop_save_handle()
        ck = self._open()
        plan = {}
        try:
            for e in entries:
                t = into[e[0]]
                gs, go = places.get(e[0], (None, None))
                ck.register(e[0], e[2], e[3], t.data_ptr(), t.numel() * t.element_size(),
                            t, gs, go)
                if e[0] != META:
                    plan[e[0]] = (t.data_ptr(), t.dtype, tuple(t.shape),
                                  _place_key(places.get(e[0])))
        except BaseException:
            ck.close()
            raise
        self._ck, self._plan, self._meta = ck, plan, into[META]
        self._from_restore = True

    def _drop_save_handle(self):
        if self._ck is not None:
            ck, self._ck = self._ck, None
            self._plan = self._meta = None
            ck.close()               # waits for its save in flight
        self._from_restore = False

    def _replaced(self):
        """Name prefixes of the optimizer state a checkpoint may lack where
        the program has it (a checkpoint saved before the optimizer's first
        step, or before some parameter had a gradient): load_state_dict
        replaces the whole state, so the program's goes as the checkpoint
        had none.  Not FSDP1 optimizers (FSDP's own conversion wants the
        state it flattens)."""
        return tuple("%s/state/" % k for k, o in self.state.items()
                     if isinstance(o, torch.optim.Optimizer) and k not in self._fsdp1_optim)

    def _lazy(self):
        """Name prefixes of optimizer state, which load_state_dict replaces
        rather than copies into (and which the program may not have yet)."""
        return tuple("%s/state/" % k for k, o in self.state.items()
                     if isinstance(o, torch.optim.Optimizer))

    def _check_groups(self, step, objects):
        """Each optimizer's parameter groups against the checkpoint's: as
        many groups, of as many parameters each.  torch's load_state_dict
        checks the same, but only once the rest of the state (the model,
        read into place) is loaded: a difference found there would leave
        the model at the checkpoint's step and the optimizer not.  Raises
        ValueError naming the entry and both layouts.  (FSDP1 optimizers,
        loaded through FSDP's own conversion, are left to it.)"""
        for key, obj in self.state.items():
            if not isinstance(obj, torch.optim.Optimizer) or key in self._fsdp1_optim:
                continue
            sk = objects[key][1] if len(objects[key]) > 1 else None
            groups = sk.get("param_groups") if isinstance(sk, dict) else None
            if not isinstance(groups, (list, tuple)):
                continue
            saved = [len(g["params"]) if isinstance(g, dict) and
                     isinstance(g.get("params"), (list, tuple)) else -1 for g in groups]
            have = [len(g["params"]) for g in obj.param_groups]
            if saved != have:
                raise ValueError("state[%r]: the optimizer has %s; checkpoint step %d "
                                 "has %s (its parameter groups changed)"
                                 % (key, _groups_text(have), step, _groups_text(saved)))

    def _check_layout(self, lay, entries, meta, live, places):
        """The checkpoint's state against the program's, from the meta and
        the shards' headers alone (no tensor read yet): the same objects,
        the same tensor names, each tensor's dtype, shape and slice place.
        Raises ValueError naming the first difference.  Returns {name:
        layout entry} of every tensor of the state this rank restores."""
        step = lay.step
        objects = meta["objects"]
        if set(objects) != set(self.state):
            raise ValueError("checkpoint step %d holds state %s; the program's "
                             "state is %s" % (step, sorted(objects), sorted(self.state)))
        self._check_groups(step, objects)
        saved = {e[0]: e for e in entries if e[0] != META}
        where = {(e[0], e[1]): e for e in lay.tensors()}
        owners = meta.get("replicated", {})
        for n in _refs(objects, []):
            if n not in saved:
                e = where.get((n, owners.get(n, -1)))
                if e is None:
                    raise ValueError("tensor %s: in checkpoint step %d's state, but in "
                                     "no shard (owner %s)" % (n, step, owners.get(n)))
                saved[n] = e
        lazy, replaced = self._lazy(), self._replaced()
        for name, t in live.items():
            e = saved.get(name)
            if e is None and name.startswith(replaced):
                continue
            if e is None:
                raise ValueError("tensor %s: in the program's state, not in checkpoint "
                                 "step %d (the state dict's keys changed)" % (name, step))
            if name.startswith(lazy):
                continue
            if tuple(e[3]) != tuple(t.shape) or _TORCH_OF.get(e[2]) != t.dtype:
                raise ValueError("tensor %s: the program has %s %s, checkpoint step "
                                 "%d has %s %s" % (name, t.dtype, tuple(t.shape), step,
                                                   _TORCH_OF.get(e[2], "dtype %d" % e[2]),
                                                   tuple(e[3])))
        for name in saved:
            if name not in live and not name.startswith(lazy):
                raise ValueError("tensor %s: in checkpoint step %d, not in the "
                                 "program's state (the state dict's keys changed)"
                                 % (name, step))
        for name, (gs, go) in places.items():
            e = saved.get(name)
            if e is None:            # optimizer state the checkpoint lacks
                continue
            got = (tuple(e[4]), tuple(e[5]))
            if got != (tuple(gs), tuple(go)):
                raise ValueError("tensor %s: the program has the slice at %s of a "
                                 "tensor of %s, checkpoint step %d has it at %s of %s"
                                 % (name, tuple(go), tuple(gs), step, got[1], got[0]))
        return saved

    def _read_fresh(self, lay, entries):
        """_read_same into new tensors, loaded by _load with copy_ and
        load_state_dict (DTensor and ShardedTensor state, and a shard whose
        meta does not read: the engine's restore falls back from it)."""
        bufs = {}
        # new and nobody else's; the engine's synchronous handle verifies
        # the shard before it reads it into them
        for e in entries:
            bufs[e[0]] = self._alloc(e)
        got = self._engine_restore(entries, bufs)
        if got is False:
            return (None, None, None, None)   # another step: ask again
        if got is None or got != lay.step:
            return None if got is None else (got, None, None, None)
        meta = self._parse_meta(got, bufs.pop(META))
        # where each of this rank's saved tensors sat in its global tensor
        meta["_places"] = {e[0]: (tuple(e[4]), tuple(e[5])) for e in entries}
        need = [n for n in _refs(meta["objects"], []) if n not in bufs]
        where = {(e[0], e[1]): e for e in lay.tensors()}
        owners = meta.get("replicated", {})
        reqs = []
        for n in need:
            e = where.get((n, owners.get(n, -1)))
            if e is None:
                raise ValueError("tensor %s: in checkpoint step %d's state, but in no "
                                 "shard (owner %s)" % (n, got, owners.get(n)))
            t = bufs[n] = self._alloc(e)
            if n in meta.get("slices", ()):   # a DTensor shard another rank wrote
                meta["_places"][n] = (tuple(e[4]), tuple(e[5]))
            reqs.append((n, e[1], e[2], e[3], e[4], e[5], t.data_ptr(),
                         t.numel() * t.element_size()))
        if reqs:
            lay.read(reqs)
        return got, bufs, meta, True

    def _read_other(self, lay):
        """Saved by another number of ranks: replicated tensors from any
        shard, this rank's slices from the overlapping saved ones; per-rank
        state cannot be mapped and is refused, naming both sizes."""
        n_old, step = lay.world_size, lay.step
        src = self.rank if self.rank < n_old else 0
        entries = lay.tensors()
        metas = [e for e in entries if e[0] == META and e[1] == src]
        if not metas:
            raise ValueError("checkpoint step %d in %s has no %s: not written "
                             "by firebreak.Checkpointer" % (step, self.dir, META))
        mbuf = self._alloc(metas[0])
        e = metas[0]
        lay.read([(META, src, e[2], e[3], e[4], e[5], mbuf.data_ptr(), mbuf.numel())])
        meta = self._parse_meta(step, mbuf)
        owners = meta.get("replicated", {})
        sliced = set(meta.get("slices", ()))
        members = meta.get("members")
        plain = [n for n in owners if n not in sliced]  # not DTensor shards
        if plain and members is not None and list(members) != list(range(n_old)):
            # replicas of one group only: another group's tensor of the same
            # name may hold other values, so "any shard" would be wrong
            raise Error(_firebreak.EMISMATCH,
                        "checkpoint step %d was saved by %d ranks, this job has %d: "
                        "its replicated state is replicated over the group %s, not "
                        "the whole world, and cannot be restored on another world "
                        "size" % (step, n_old, self.world_size, list(members)))
        _, live, places, lives = self._flatten()
        first = {}
        for e in entries:
            first.setdefault(e[0], e)
        bufs, reqs = {}, []
        for n in _refs(meta["objects"], [], empty=True):
            if n in lives and n not in live:
                continue                 # a ShardedTensor with no local shard here
            e = first.get(n)
            if e is None:
                raise ValueError("tensor %s: in checkpoint step %d's state, but in no "
                                 "shard" % (n, step))
            if n in sliced:
                if n in places:
                    gs, go = places[n]
                    region = (tuple(live[n].shape), gs, go)
                elif n in live:          # whole here (FSDP on one rank)
                    shape = tuple(live[n].shape)
                    region = (shape, shape, (0,) * len(shape))
                else:
                    p = self._state_template(n, e[4])
                    if p is None:
                        raise Error(_firebreak.EMISMATCH,
                                    "checkpoint step %d was saved by %d ranks, this job "
                                    "has %d: tensor %s is a slice there, and this rank "
                                    "has no slice of it to take its place from"
                                    % (step, n_old, self.world_size, n))
                    local, gs, go = _dtensor_place(p)
                    region = (tuple(local.shape), gs, go)
            elif n in owners:
                region = (e[3], e[3], (0,) * len(e[3]))
            else:
                raise Error(_firebreak.EMISMATCH,
                            "checkpoint step %d was saved by %d ranks, this job has %d: "
                            "tensor %s is per-rank state (neither replicated nor "
                            "sharded) and cannot be restored on another world size"
                            % (step, n_old, self.world_size, n))
            t = bufs[n] = torch.empty(region[0], dtype=_TORCH_OF[e[2]])
            reqs.append((n, -1, e[2], region[0], region[1], region[2], t.data_ptr(),
                         t.numel() * t.element_size()))
        lay.read(reqs)
        return step, bufs, meta, self.rank < n_old

    @staticmethod
    def _parse_meta(step, buf):
        raw = buf.numpy().tobytes()
        magic, length = _META_HDR.unpack_from(raw)
        if magic != b"FBPY" or length > len(raw) - _META_HDR.size:
            raise ValueError("checkpoint step %d: %s is malformed" % (step, META))
        meta = _safe_loads(raw[_META_HDR.size:_META_HDR.size + length])
        if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
            raise ValueError("checkpoint step %d: meta format %r, expected %d"
                             % (step, meta.get("format") if isinstance(meta, dict)
                                else None, META_FORMAT))
        return meta

    def _load(self, step, bufs, meta, own_rng):
        objects = meta["objects"]
        # Check everything against the live state before changing any of it.
        if set(objects) != set(self.state):
            raise ValueError("checkpoint step %d holds state %s; the program's "
                             "state is %s" % (step, sorted(objects), sorted(self.state)))
        self._check_groups(step, objects)
        _, live, places, dtensors = self._flatten()
        for name, b in bufs.items():     # lazily created state of DTensors
            p = None if name in live else self._param_of(name)
            if _DTensor is not None and isinstance(p, _DTensor):
                local, gs, go = _dtensor_place(p)
                if tuple(b.shape) == tuple(local.shape):
                    dtensors[name] = p
                    places[name] = (gs, go)
        saved_places = meta.get("_places")   # None: resharded to the live places
        for name, (gs, go) in places.items():
            got = saved_places.get(name) if saved_places is not None else None
            if got is not None and got != (tuple(gs), tuple(go)):
                raise ValueError("tensor %s: the program has the slice at %s of a "
                                 "tensor of %s, checkpoint step %d has it at %s of %s"
                                 % (name, tuple(go), tuple(gs), step, got[1], got[0]))
        lazy, replaced = self._lazy(), self._replaced()
        for name, t in live.items():
            if name not in bufs and name.startswith(replaced):
                continue                  # replaced by the checkpoint's none
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
        key = None
        try:
            with torch.no_grad():
                for key, obj in self.state.items():
                    kind, sk = objects[key]
                    value = _fill(sk, bufs, dtensors)
                    if isinstance(obj, Slice):
                        obj.tensor.copy_(value)
                    elif isinstance(obj, torch.Tensor):
                        obj.copy_(value)
                    else:
                        self._load_state_dict(key, obj, value)
        except Exception as e:
            # What the checks above cannot foresee (an object's own
            # load_state_dict refusing): the tensors read into place, and
            # the entries before this one, already hold the checkpoint.
            warnings.warn("firebreak.Checkpointer: restoring step %d failed at "
                          "state[%r] (%s: %s); the state may hold step %d in part: "
                          "do not train on it, restore again once the cause is fixed"
                          % (step, key, type(e).__name__, e, step),
                          RuntimeWarning, stacklevel=3)
            raise
        if own_rng:
            _set_rng_state(meta["rng"])
        self.extra = meta["extra"]
