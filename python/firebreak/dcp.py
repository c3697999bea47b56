"""torch.distributed.checkpoint (DCP) storage for firebreak checkpoints.

    import torch.distributed.checkpoint as dcp
    from firebreak.dcp import StorageWriter, StorageReader

    dcp.save(state_dict, storage_writer=StorageWriter("ckpt", step=200))
    dcp.async_save(state_dict, storage_writer=StorageWriter("ckpt", step=300))
    dcp.load(state_dict, storage_reader=StorageReader("ckpt"))   # newest

What DCP plans is stored as a firebreak checkpoint (docs/checkpoint.md):
each rank of the process group writes its items into its own shard,
<dir>/step-N/rank-R.safetensors, through the C engine, which hashes every
tensor and commits the shard (temporary file, fsync, rename).  Tensors
keep their dtype and shape (a dtype the format lacks is stored as its raw
bytes, U8); DCP's non-tensor items (torch.save bytes) are U8 tensors.
DCP's metadata (its global plan: every item's global shape, chunks and
which shard holds it) is pickled into one more U8 tensor,
"__dcp__/metadata", in the coordinator's shard, which the coordinator
writes in finish(), after every other rank's shard is committed: so the
step is complete (every rank's shard committed) only once the metadata is
there, and `firebreak ckpt verify` checks every byte of it.

The reader reads each tensor it needs from whichever shard holds it (so a
checkpoint loads on another world size, as DCP reshards), compares every
one with its recorded hash before any of them is handed to DCP, and
unpickles the metadata with an allow-list (DCP's metadata classes, torch
dtypes and sizes, plain values).  Needs torch 2.x (the StorageWriter
interface with reset() and set_up_storage_writer()).
"""
import enum
import io
import os
import pickle

import torch
from torch.futures import Future

try:
    import torch.distributed.checkpoint as _dcp
    from torch.distributed.checkpoint import metadata as _dcp_md
    from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
    from torch.distributed.checkpoint.storage import WriteResult
except ImportError as e:  # torch 1.x, or torch without distributed
    raise ImportError("firebreak.dcp needs torch.distributed.checkpoint of "
                      "torch 2.x; torch %s lacks it (%s)" % (torch.__version__, e))
if not hasattr(_dcp.StorageWriter, "set_up_storage_writer"):
    raise ImportError("firebreak.dcp needs the torch 2.x StorageWriter interface "
                      "(set_up_storage_writer); torch %s has another" % torch.__version__)

from . import _firebreak
from ._firebreak import Error
from ._torch import _DTYPES, _STEP_NAME, _TORCH_OF, _whole

__all__ = ["StorageWriter", "StorageReader", "METADATA"]

METADATA = "__dcp__/metadata"   # the tensor holding DCP's pickled Metadata


def _parse_id(checkpoint_id, dir, step):
    """(dir, step) from a checkpoint_id: a step number, a step directory
    (<dir>/step-NNNNNNNNNN) or a checkpoint directory (step unchanged)."""
    if isinstance(checkpoint_id, bool):
        raise TypeError("checkpoint_id %r: expected a step or a path" % checkpoint_id)
    if isinstance(checkpoint_id, int):
        return dir, _whole(checkpoint_id, "checkpoint_id", 0)
    path = os.fspath(checkpoint_id).rstrip("/") or "/"
    m = _STEP_NAME.fullmatch(os.path.basename(path))
    if m:
        return os.path.dirname(path) or ".", int(m.group(1))
    return path, step


def _open(dir, world=0, max_step=None):
    """The newest complete checkpoint of dir at or below max_step (saved by
    `world` ranks; 0: any), through libfirebreak's public reader
    (fb_ckpt_layout_*): (step, world size, [(name, rank, dtype, shape,
    global shape, offset)]) and the open layout, or None."""
    lay = _firebreak.open_layout(dir, world, max_step)
    if lay is None:
        return None
    try:
        return lay.step, lay.world_size, lay.tensors(), lay
    except BaseException:
        lay.close()
        raise


def _complete(dir, step):
    """Whether `step` of dir is a complete checkpoint."""
    got = _open(dir, 0, step)
    if got is None:
        return False
    got[3].close()
    return got[0] == step


def _item_name(index, whole, taken, n):
    """The shard's name for a DCP item: its fqn (with the chunk's offsets
    when it is a part of the tensor) where that is a valid, unused name,
    else __dcp__/item/<n>."""
    name = index.fqn
    if not whole and index.offset is not None:
        name += "@" + ",".join(str(o) for o in index.offset)
    ok = (0 < len(name) <= 1000 and all(0x20 <= ord(c) < 0x7f for c in name)
          and not name.startswith("__dcp__/") and not name.startswith("__firebreak__/")
          and name != "__metadata__" and name not in taken)
    return name if ok else "__dcp__/item/%d" % n


def _prepare_tensor(t, item):
    """A CPU, contiguous tensor holding what DCP asked to write for item."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    want = tuple(item.tensor_data.chunk.sizes)
    if tuple(t.shape) != want:
        raise ValueError("tensor %s: DCP resolved shape %s, its plan says %s"
                         % (item.index.fqn, tuple(t.shape), want))
    return t


class StorageWriter(_dcp.StorageWriter):
    """Writes dcp.save / dcp.async_save as firebreak checkpoint `step` in
    `dir`.  keep: newest complete checkpoints kept in dir (rank 0 deletes
    older ones after its commit, as the engine does).  checkpoint_id (given
    to dcp.save) may be a step number or a step directory
    <dir>/step-NNNNNNNNNN.  A step that is already a complete checkpoint
    is not overwritten (ValueError)."""

    def __init__(self, dir, step=None, keep=2):
        self.dir = os.fspath(dir)
        self.step = None if step is None else _whole(step, "step", 0)
        self.keep = _whole(keep, "keep", 1, 1 << 20)
        self._coordinator = False
        self._rank = None
        self._pending = None   # coordinator: its Ckpt, registered, until finish()

    # -- the DCP interface
    def reset(self, checkpoint_id=None):
        self._close_pending()
        if checkpoint_id is not None:
            self.dir, self.step = _parse_id(checkpoint_id, self.dir, self.step)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            return _STEP_NAME.fullmatch(os.path.basename(os.fspath(checkpoint_id).rstrip("/"))) is not None
        except TypeError:
            return False

    @property
    def checkpoint_id(self):
        return os.path.join(self.dir, "step-%010d" % self.step) if self.step is not None else self.dir

    def storage_meta(self):
        return _dcp_md.StorageMeta(checkpoint_id=self.checkpoint_id)

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        if kwargs.get("use_collectives", True) is False:
            raise ValueError("firebreak.dcp.StorageWriter needs use_collectives=True: "
                             "a firebreak checkpoint is complete when every rank's "
                             "shard is committed, which the coordinator marks")
        if not isinstance(self.step, int) or isinstance(self.step, bool) or self.step < 0:
            raise ValueError("firebreak.dcp.StorageWriter: no step to save (%r): "
                             "StorageWriter(dir, step=N), or checkpoint_id=N"
                             % (self.step,))
        self._coordinator = bool(is_coordinator)
        self._rank = kwargs.get("rank")

    def prepare_local_plan(self, plan):
        if _complete(self.dir, self.step):
            raise ValueError("%s: step %d is already a complete checkpoint; "
                             "firebreak does not overwrite one" % (self.dir, self.step))
        return plan

    def prepare_global_plan(self, plans):
        # Each rank learns its shard's number and the world size (the
        # process group DCP uses may be a subgroup; this is its order).
        import dataclasses
        n = len(plans)
        return [dataclasses.replace(p, storage_data=(i, n)) for i, p in enumerate(plans)]

    def write_data(self, plan, planner):
        if isinstance(plan.storage_data, tuple) and len(plan.storage_data) == 2:
            rank, world = plan.storage_data
        else:   # a cached plan without ours (DCP's plan caching)
            import torch.distributed as dist
            rank = self._rank if self._rank is not None else 0
            world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        ck = _firebreak.Ckpt(dir=self.dir, rank=rank, world_size=world,
                             keep=self.keep, async_save=False)
        results, taken = [], set()
        try:
            for n, item in enumerate(plan.items):
                if item.type == WriteItemType.BYTE_IO:
                    data = planner.resolve_data(item).getvalue()
                    t = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if data
                         else torch.empty(0, dtype=torch.uint8))
                    name = _item_name(item.index, True, taken, n)
                    info = (rank, name)
                else:
                    t = _prepare_tensor(planner.resolve_data(item), item)
                    chunk = item.tensor_data.chunk
                    whole = (tuple(chunk.sizes) == tuple(item.tensor_data.size)
                             and not any(chunk.offsets))
                    name = _item_name(item.index, whole, taken, n)
                    info = (rank, name)
                    if t.dtype not in _DTYPES:   # stored as its bytes
                        info = (rank, name, str(t.dtype).replace("torch.", ""),
                                tuple(t.shape))
                        t = t.reshape(-1).view(torch.uint8)
                taken.add(name)
                nbytes = t.numel() * t.element_size()
                ck.register(name, _DTYPES[t.dtype], tuple(t.shape), t.data_ptr(),
                            nbytes, t)
                results.append(WriteResult(index=item.index, size_in_bytes=nbytes,
                                           storage_data=info))
            if self._coordinator:
                self._pending = ck   # written with the metadata, in finish()
                ck = None
            else:
                ck.save(self.step)   # synchronous: committed on return
        finally:
            if ck is not None:
                ck.close()
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        ck, self._pending = self._pending, None
        if ck is None:
            raise RuntimeError("firebreak.dcp.StorageWriter.finish: no write_data "
                               "on this coordinator")
        try:
            storage = {}
            for wrs in results:
                for wr in wrs:
                    storage[wr.index] = wr.storage_data
            metadata.storage_data = storage
            metadata.storage_meta = self.storage_meta()
            if getattr(metadata, "version", None) is None:
                metadata.version = "1.0.0"
            blob = pickle.dumps(metadata, protocol=4)
            t = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
            ck.register(METADATA, _firebreak.DTYPE_U8, (t.numel(),), t.data_ptr(),
                        t.numel(), t)
            ck.save(self.step)   # the commit: the step is now complete
        finally:
            ck.close()

    def _close_pending(self):
        ck, self._pending = self._pending, None
        if ck is not None:
            ck.close()


def _enum_member(cls, name):
    """getattr for pickled enum members (how Python pickles them), limited
    to the enums of DCP's metadata module."""
    if (isinstance(cls, type) and issubclass(cls, enum.Enum)
            and cls.__module__ == _dcp_md.__name__ and name in cls.__members__):
        return cls.__members__[name]
    raise pickle.UnpicklingError("DCP metadata asks for attribute %r of %r" % (name, cls))


class _MetadataUnpickler(pickle.Unpickler):
    """DCP's metadata classes (and their enums' members), torch dtypes,
    layouts and sizes, plain values."""
    _PLAIN = {("collections", "OrderedDict"), ("builtins", "set"),
              ("builtins", "frozenset"), ("builtins", "slice"),
              ("builtins", "complex")}

    def find_class(self, module, name):
        if (module, name) in self._PLAIN:
            return super().find_class(module, name)
        if (module, name) == ("builtins", "getattr"):
            return _enum_member
        if (module, name) == ("torch.serialization", "_get_layout"):
            return super().find_class(module, name)   # a layout by its name
        if module == "torch.distributed.checkpoint.metadata":
            obj = getattr(_dcp_md, name, None)
            if isinstance(obj, type) and obj.__module__ == module:
                return obj
        if module == "torch":
            obj = getattr(torch, name, None)
            if obj is torch.Size or isinstance(obj, (torch.dtype, torch.layout,
                                                     torch.memory_format)):
                return obj
        raise pickle.UnpicklingError(
            "DCP metadata refers to %s.%s, which firebreak.dcp does not load "
            "(only DCP's metadata classes, torch dtypes and plain values)"
            % (module, name))


class StorageReader(_dcp.StorageReader):
    """Reads a firebreak checkpoint written by StorageWriter for dcp.load:
    step `step` of `dir`, or the newest complete one that DCP wrote.
    checkpoint_id (given to dcp.load) may be a step number, a step
    directory or a checkpoint directory.  Every tensor is checked against
    its hash before any is loaded; a mismatch raises firebreak.Error naming
    the shard and the tensor."""

    def __init__(self, dir, step=None):
        self.dir = os.fspath(dir)
        self.step = None if step is None else _whole(step, "step", 0)
        self._read = None      # (step, world_size) of the metadata read
        self._storage = None

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.dir, self.step = _parse_id(checkpoint_id, self.dir, self.step)
        self._read = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return StorageWriter.validate_checkpoint_id(checkpoint_id)

    @property
    def checkpoint_id(self):
        return os.path.join(self.dir, "step-%010d" % self.step) if self.step is not None else self.dir

    def _pick(self):
        """(step, world size, the rank whose shard holds DCP's metadata) of
        step `self.step`, or of the newest complete checkpoint DCP wrote."""
        max_step = self.step
        while True:
            got = _open(self.dir, 0, max_step)
            if got is None or (self.step is not None and got[0] != self.step):
                if got is not None:
                    got[3].close()
                if self.step is not None:
                    raise Error(_firebreak.ENOCKPT, "%s: no complete checkpoint step %d"
                                % (self.dir, self.step))
                raise Error(_firebreak.ENOCKPT, "%s: no complete checkpoint written "
                            "by torch.distributed.checkpoint" % self.dir)
            step, world, entries, lay = got
            lay.close()
            holder = next((e[1] for e in entries if e[0] == METADATA), None)
            if holder is not None:
                return step, world, holder
            if self.step is not None:
                raise Error(_firebreak.ENOCKPT, "%s: step %d was not written by "
                            "torch.distributed.checkpoint (no %s)"
                            % (self.dir, step, METADATA))
            if step == 0:
                raise Error(_firebreak.ENOCKPT, "%s: no complete checkpoint written "
                            "by torch.distributed.checkpoint" % self.dir)
            max_step = step - 1

    def _read_items(self, step, world, wanted):
        """{(rank, name): tensor} of wanted, a set of (rank, name): read
        from step's shards through the public reader, every one verified
        against its hash before any is returned."""
        got = _open(self.dir, world, step)
        if got is None or got[0] != step:
            if got is not None:
                got[3].close()
            raise Error(_firebreak.ENOCKPT, "%s: step %d (%d ranks) is no longer a "
                        "complete checkpoint" % (self.dir, step, world))
        _, _, entries, lay = got
        try:
            where = {(e[1], e[0]): e for e in entries}
            out, reqs = {}, []
            for rank, name in sorted(wanted):
                e = where.get((rank, name))
                if e is None:
                    raise Error(_firebreak.EFORMAT, "%s step %d: rank %d's shard has no "
                                "tensor %r" % (self.dir, step, rank, name))
                dtype = _TORCH_OF.get(e[2])
                if dtype is None:
                    raise Error(_firebreak.EFORMAT, "tensor %s: dtype %d not readable "
                                "here" % (name, e[2]))
                t = out[(rank, name)] = torch.empty(e[3], dtype=dtype)
                reqs.append((name, rank, e[2], e[3], e[4], e[5], t.data_ptr(),
                             t.numel() * t.element_size()))
            if reqs:
                lay.read(reqs)
        finally:
            lay.close()
        return out

    def read_metadata(self, *args, **kwargs):
        if kwargs.get("rank") is not None:
            raise ValueError("firebreak.dcp: no rank-local metadata (checkpoints "
                             "are written with use_collectives=True)")
        step, world, holder = self._pick()
        path = "%s step %d rank %d" % (self.dir, step, holder)
        blob = self._read_items(step, world, {(holder, METADATA)})[(holder, METADATA)]
        md = _MetadataUnpickler(io.BytesIO(blob.numpy().tobytes())).load()
        if not isinstance(md, _dcp_md.Metadata) or not isinstance(md.storage_data, dict):
            raise Error(_firebreak.EFORMAT, "%s: %s is not DCP metadata" % (path, METADATA))
        for index, info in md.storage_data.items():
            if (not isinstance(index, _dcp_md.MetadataIndex) or not isinstance(info, tuple)
                    or len(info) not in (2, 4) or not isinstance(info[0], int)
                    or not 0 <= info[0] < world or not isinstance(info[1], str)):
                raise Error(_firebreak.EFORMAT, "%s: %s: bad entry %r for %r"
                            % (path, METADATA, info, index))
        if md.storage_meta is None:
            md.storage_meta = _dcp_md.StorageMeta()
        self._read = (step, world)
        return md

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        if self._read is None:
            raise RuntimeError("firebreak.dcp.StorageReader: read_metadata first")
        self._storage = metadata.storage_data

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        step, world = self._read
        wanted = {}
        for item in plan.items:
            info = self._storage.get(item.storage_index)
            if info is None:
                raise Error(_firebreak.EFORMAT, "%s step %d: no shard holds %r"
                            % (self.dir, step, item.storage_index))
            wanted[(info[0], info[1])] = True
        # Every tensor this rank loads is read and verified before any of
        # them is handed to DCP: a corrupt shard changes nothing here.
        got = self._read_items(step, world, set(wanted))
        for item in plan.items:
            info = self._storage[item.storage_index]
            t = got[(info[0], info[1])]
            if item.type == LoadItemType.BYTE_IO:
                planner.load_bytes(item, io.BytesIO(t.numpy().tobytes()))
                continue
            t = self._tensor(t, info)
            for dim, (off, length) in enumerate(zip(item.storage_offsets, item.lengths)):
                t = t.narrow(dim, off, length)
            target = planner.resolve_tensor(item).detach()
            if tuple(target.shape) != tuple(t.shape):
                raise ValueError("tensor %s: DCP wants %s, the checkpoint has %s"
                                 % (item.dest_index.fqn, tuple(target.shape),
                                    tuple(t.shape)))
            target.copy_(t)
            planner.commit_tensor(item, target)
        fut = Future()
        fut.set_result(None)
        return fut

    @staticmethod
    def _tensor(t, info):
        if len(info) == 4:   # stored as its bytes
            real = getattr(torch, info[2], None)
            if not isinstance(real, torch.dtype) or t.dtype != torch.uint8:
                raise Error(_firebreak.EFORMAT, "tensor %s: stored dtype %r"
                            % (info[1], info[2]))
            t = t.view(real).reshape(info[3])
        return t
