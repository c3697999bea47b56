"""firebreak.dcp: torch.distributed.checkpoint saves and loads firebreak
checkpoints, over 2 ranks (gloo, spawned processes).

  - dcp.save (step 10) and dcp.async_save (step 20, the state changed in
    place after the call returns) of replicated tensors of several dtypes,
    a DTensor sharded over both ranks and non-tensor values;
  - `firebreak ckpt verify` passes and `ckpt ls` counts both complete;
    each replicated tensor is written once; every shard opens with the
    safetensors package and holds exactly what DCP planned, bytes equal;
  - dcp.load on 2 ranks (a given step, and the newest) restores every value
    bit for bit, and on 1 process (another world size) the DTensor loads
    into a plain tensor;
  - in one process: FQNs that are no valid tensor names (non-ASCII,
    "__metadata__") and dtypes the format lacks (float8, complex128,
    uint16, stored as bytes) round-trip;
  - saving a step that is complete again is refused; metadata naming
    anything but DCP's classes and plain values is not unpickled;
  - the coordinator killed right after committing step 30 (test builds):
    step 30 is complete and is the newest loadable checkpoint, every value
    in it: the coordinator's commit comes after every other shard's and
    carries DCP's metadata;
  - a byte flipped in rank 1's shard: dcp.load fails on both ranks naming
    that shard, and no rank's state changed; `ckpt verify` fails too.

Run: PYTHONPATH=<build>/python PYTHON dcp_interop.py FIREBREAK_BINARY
"""
import datetime
import faulthandler
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

from fbtest import check, finish, require

require("torch", "torch.distributed.checkpoint", "firebreak.dcp", "safetensors")
import firebreak
import torch
from safetensors import safe_open

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from firebreak.dcp import METADATA, StorageReader, StorageWriter

WORLD = 2


def full_state(v):
    """The state every rank saves at version v (deterministic)."""
    g = torch.Generator().manual_seed(100 + v)
    return {
        "model.w": torch.randn(64, 32, generator=g),
        "model.b": torch.randn(32, generator=g),
        "emb": torch.randn(16, 8, generator=g).to(torch.bfloat16),
        "half": torch.randn(9, generator=g).to(torch.float16),
        "ids": torch.randint(-1000, 1000, (50,), generator=g),
        "small": torch.randint(-100, 100, (7,), generator=g).to(torch.int8),
        "mask": torch.rand(20, generator=g) > 0.5,
        "scalar": torch.tensor(3.5 + v, dtype=torch.float64),
        "sharded": torch.randn(11, 6, generator=g),
        "extra": {"step": 7 + v, "tag": "v%d" % v},
    }


def zero_like(state):
    out = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out[k] = {kk: (0 if isinstance(vv, int) else "") for kk, vv in v.items()}
        else:
            out[k] = torch.zeros_like(v)
    return out


def same(a, b):
    """Bit-identical tensors (as bytes), or equal plain values."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))
    return a == b


def compare(got, want, where):
    bad = []
    for k, v in want.items():
        g = got[k]
        if hasattr(g, "full_tensor"):
            g = g.full_tensor()
        if isinstance(v, dict):
            bad += ["%s.%s" % (k, kk) for kk in v if not same(g[kk], v[kk])]
        elif not same(g, v):
            bad.append(k)
    if bad:
        raise AssertionError("%s: differs from what was saved: %s" % (where, bad))


# ------------------------------------------------------------- workers

def worker(rank, phase, ckdir, pgfile):
    dist.init_process_group("gloo", init_method="file://" + pgfile, rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (WORLD,))

    def dist_state(state):
        state = dict(state)
        state["sharded"] = distribute_tensor(state["sharded"], mesh, [Shard(0)])
        return state

    if phase == "save":
        dcp.save(dist_state(full_state(0)), storage_writer=StorageWriter(ckdir, step=10))
        try:
            dcp.save(dist_state(full_state(5)), storage_writer=StorageWriter(ckdir, step=10))
            raise AssertionError("a second save of complete step 10 was not refused")
        except BaseException as e:   # DCP wraps it in a CheckpointException (a BaseException)
            if "already a complete checkpoint" not in str(e):
                raise
        state = dist_state(full_state(1))
        fut = dcp.async_save(state, storage_writer=StorageWriter(ckdir, step=20))
        for k, v in state.items():   # what async_save staged must be saved
            if isinstance(v, torch.Tensor) and not hasattr(v, "full_tensor"):
                v.fill_(1)
        fut = getattr(fut, "upload_completion", fut)
        fut.result()
    elif phase == "load":
        for v, reader in ((0, StorageReader(ckdir, step=10)), (1, StorageReader(ckdir))):
            state = dist_state(zero_like(full_state(v)))
            dcp.load(state, storage_reader=reader)
            compare(state, full_state(v), "rank %d, load of %s" % (rank, reader.checkpoint_id))
    elif phase == "load_corrupt":
        state = dist_state(zero_like(full_state(1)))
        before = {k: (t.full_tensor() if hasattr(t, "full_tensor") else t.clone())
                  for k, t in state.items() if isinstance(t, torch.Tensor)}
        try:
            dcp.load(state, storage_reader=StorageReader(ckdir, step=20))
            raise AssertionError("dcp.load of a corrupt shard succeeded")
        except AssertionError:
            raise
        except BaseException as e:   # CheckpointException
            msg = str(e)
            if "rank-00001.safetensors" not in msg or "corrupt" not in msg:
                raise AssertionError("the error does not name the corrupt "
                                     "shard: %s" % msg[-2000:])
        for k, t in before.items():
            now = state[k].full_tensor() if hasattr(state[k], "full_tensor") else state[k]
            if not same(now, t):
                raise AssertionError("rank %d: %s changed by a failed load" % (rank, k))
    elif phase == "crash":
        # rank 0 (the coordinator) has FIREBREAK_CKPT_CRASH_AT=after_rename@30
        dcp.save(dist_state(full_state(3)), storage_writer=StorageWriter(ckdir, step=30))
        raise AssertionError("the save of step 30 went through")
    # No rank tears gloo down while a peer still uses it (a CI run: rank 0
    # saved, then aborted on its way out, "terminate called without an
    # active exception"; replicated.py's workers had the same).
    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: %s ok" % (rank, phase))


# -------------------------------------------------------------- parent

def run_ranks(phase, ckdir, tmp, env0=None, expect_ok=True):
    pgfile = os.path.join(tmp, "pg-" + phase)
    t0 = time.monotonic()
    procs = []
    for r in range(WORLD):
        env = dict(os.environ)
        if r == 0 and env0:
            env.update(env0)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", str(r), phase, ckdir,
             pgfile], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outs.append((p.returncode, out.decode(errors="replace")))
    print("%s: exits %s in %.1f s" % (phase, [o[0] for o in outs], time.monotonic() - t0))
    if expect_ok:
        for r, (rc, out) in enumerate(outs):
            check(rc == 0, "%s: rank %d exited %d:\n%s" % (phase, r, rc, out[-3000:]))
    return outs


def verify(fb, ckdir, *args):
    p = subprocess.run([fb, "ckpt", "verify", ckdir] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return p.returncode, p.stdout.decode(errors="replace")


def listing(fb, ckdir):
    p = subprocess.run([fb, "ckpt", "ls", ckdir, "--json"], stdout=subprocess.PIPE, check=True)
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def check_shards(ckdir, step, want):
    """Every shard of step opens with the safetensors package; its tensors
    are exactly DCP's items of that shard plus the metadata, bytes equal to
    what was saved; each replicated tensor was written by one rank."""
    md = StorageReader(ckdir, step=step).read_metadata()
    where = {}
    for index, info in md.storage_data.items():
        where.setdefault(info[0], {})[info[1]] = index
    seen = {}
    for r in range(WORLD):
        path = os.path.join(ckdir, "step-%010d" % step, "rank-%05d.safetensors" % r)
        with safe_open(path, "pt") as f:
            meta = f.metadata()
            check(meta.get("firebreak.step") == str(step), "%s: firebreak.step %r"
                  % (path, meta.get("firebreak.step")))
            names = set(f.keys())
            expect = set(where.get(r, {}))
            if r == 0:
                expect.add(METADATA)
            check(names == expect, "%s holds %s, DCP planned %s" % (path, sorted(names),
                                                                     sorted(expect)))
            for name in names & set(where.get(r, {})):
                check(("firebreak.hash." + name) in meta, "%s: no hash of %s" % (path, name))
                t = f.get_tensor(name)
                index = where[r][name]
                seen.setdefault(index.fqn, []).append(r)
                top, _, sub = index.fqn.partition(".")
                if top == "extra":   # a non-tensor value, torch.save'd
                    val = torch.load(io.BytesIO(t.numpy().tobytes()), weights_only=False)
                    check(val == want["extra"][sub], "%s: %s = %r" % (path, name, val))
                    continue
                full = want[index.fqn]
                for dim, off in enumerate(index.offset):
                    full = full.narrow(dim, off, t.shape[dim])
                check(same(t, full), "%s: tensor %s differs from what was saved"
                      % (path, name))
    for fqn, ranks in seen.items():
        if fqn == "sharded":
            check(sorted(ranks) == list(range(WORLD)), "sharded: chunks in shards %s" % ranks)
        else:
            check(len(ranks) == 1, "replicated %s written by ranks %s" % (fqn, ranks))
    return md


def load_here(ckdir, step, v, what):
    """dcp.load of step in this process (no process group): full_state(v)."""
    state = zero_like(full_state(v))
    dcp.load(state, storage_reader=StorageReader(ckdir, step=step), no_dist=True)
    try:
        compare(state, full_state(v), what)
    except AssertionError as e:
        check(False, str(e))


def flip_byte(ckdir, step, rank, tensor):
    path = os.path.join(ckdir, "step-%010d" % step, "rank-%05d.safetensors" % rank)
    with open(path, "r+b") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        begin, end = header[tensor]["data_offsets"]
        pos = 8 + n + (begin + end) // 2
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x5A]))
    return path


def main():
    fb = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="fb-dcp.")
    ckdir = os.path.join(tmp, "ckpt")
    try:
        run_ranks("save", ckdir, tmp)
        rc, out = verify(fb, ckdir)
        check(rc == 0, "ckpt verify after dcp.save exited %d:\n%s" % (rc, out))
        ls = listing(fb, ckdir)
        check(ls.get("complete") == 2, "ckpt ls: %s" % ls)
        check_shards(ckdir, 10, full_state(0))
        check_shards(ckdir, 20, full_state(1))

        run_ranks("load", ckdir, tmp)

        # Another world size: one process, the DTensor into a plain tensor.
        load_here(ckdir, 10, 0, "1-process load of a 2-rank checkpoint")

        # A step given as anything but a whole number, or above an int64:
        # refused when the writer is made, naming it.
        for bad, exc, words in (("3", TypeError, "step: expected an int, got str"),
                                (2 ** 63, ValueError, "step 9223372036854775808"),
                                (-1, ValueError, "step -1")):
            try:
                StorageWriter(os.path.join(tmp, "bad"), step=bad)
                check(False, "StorageWriter(step=%r) accepted" % (bad,))
            except exc as e:
                check(words in str(e), "StorageWriter(step=%r): %r" % (bad, str(e)))
        # a step of more than 10 digits is a step directory too
        check(StorageWriter.validate_checkpoint_id(os.path.join(tmp, "step-12345678901")),
              "step-12345678901 not taken for a step directory")

        # One process: names the format cannot hold, dtypes it lacks.
        odd = {"mod\u00e8le.w": torch.randn(3, 2), "__metadata__": torch.arange(4),
               "f8": torch.randn(6).to(torch.float8_e4m3fn),
               "c128": torch.randn(3, dtype=torch.complex128),
               "u16": torch.arange(5).to(torch.uint16), "empty": torch.zeros(0, 3)}
        odd_dir = os.path.join(tmp, "odd")
        dcp.save(odd, storage_writer=StorageWriter(odd_dir, step=1), no_dist=True)
        back = {k: torch.zeros_like(v) for k, v in odd.items()}
        dcp.load(back, storage_reader=StorageReader(odd_dir), no_dist=True)
        for k in odd:
            check(same(back[k], odd[k]), "1 process: %r differs after dcp.load" % k)
        with safe_open(os.path.join(odd_dir, "step-0000000001", "rank-00000.safetensors"),
                       "pt") as f:
            names = sorted(f.keys())
        check(all(0x20 <= ord(c) < 0x7f for n in names for c in n)
              and "__metadata__" not in names, "shard names: %s" % names)
        rc, out = verify(fb, odd_dir)
        check(rc == 0, "ckpt verify of the 1-process checkpoint exited %d:\n%s" % (rc, out))

        # The reader (libfirebreak's public fb_ckpt_layout_*): a step that
        # is not there, a tensor a shard lacks, one of another rank.
        from firebreak import _firebreak
        rd = StorageReader(ckdir, step=21)
        for want, words in (({(1, "nope")}, '\'nope\''),
                            ({(5, METADATA)}, "rank 5")):
            try:
                StorageReader(ckdir)._read_items(20, 2, want)
                check(False, "_read_items(%r) did not raise" % (want,))
            except firebreak.Error as e:
                check(words in str(e), "_read_items(%r): %r does not say %s" % (want, e, words))
        try:
            rd.read_metadata()
            check(False, "step 21 read")
        except firebreak.Error as e:
            check("no complete checkpoint step 21" in str(e), "step 21: %r" % e)

        # Metadata that would run code when unpickled is refused.
        blob = torch.frombuffer(bytearray(pickle.dumps(os.system)), dtype=torch.uint8)
        ck = _firebreak.Ckpt(dir=os.path.join(tmp, "evil"), rank=0, world_size=1,
                             async_save=False)
        ck.register(METADATA, _firebreak.DTYPE_U8, (blob.numel(),), blob.data_ptr(),
                    blob.numel(), blob)
        ck.save(40)
        ck.close()
        try:
            StorageReader(os.path.join(tmp, "evil")).read_metadata()
            check(False, "metadata naming os.system was unpickled")
        except Exception as e:
            check(isinstance(e, pickle.UnpicklingError) and "system" in str(e),
                  "not refused by the unpickler, or without saying why: %r" % e)

        if os.environ.get("FB_TEST_HOOKS", "ON").upper() in ("ON", "1", "TRUE", "YES"):
            # The coordinator killed right after its commit: the step is
            # complete then, and only then, with the metadata in it.
            outs = run_ranks("crash", ckdir, tmp,
                             env0={"FIREBREAK_CKPT_CRASH_AT": "after_rename@30"},
                             expect_ok=False)
            check(outs[0][0] == -9, "rank 0 exited %d, not killed at after_rename:\n%s"
                  % (outs[0][0], outs[0][1][-2000:]))
            check(outs[1][0] != 0, "rank 1 finished a save whose coordinator died")
            ls = listing(fb, ckdir)
            check(ls.get("complete") == 3, "after the crash, ckpt ls: %s" % ls)
            rc, out = verify(fb, ckdir, "--step", "30")
            check(rc == 0, "ckpt verify of step 30 exited %d:\n%s" % (rc, out))
            md = StorageReader(ckdir).read_metadata()
            check(md.storage_meta.checkpoint_id.endswith("step-0000000030"),
                  "newest loadable: %s, not step 30" % md.storage_meta.checkpoint_id)
            load_here(ckdir, 30, 3, "step 30, committed as its coordinator died")
        else:
            print("crash case skipped: not a test build (FB_TEST_HOOKS)")

        # A replicated tensor held by rank 1 (every rank loads it), corrupted.
        md = StorageReader(ckdir, step=20).read_metadata()
        held = sorted(info[1] for index, info in md.storage_data.items()
                      if info[0] == 1 and index.fqn != "sharded" and not
                      index.fqn.startswith("extra."))
        if check(held, "rank 1's shard holds no replicated tensor"):
            path = flip_byte(ckdir, 20, 1, held[0])
            run_ranks("load_corrupt", ckdir, tmp)
            rc, out = verify(fb, ckdir, "--step", "20")
            check(rc == 1 and path in out, "ckpt verify of the corrupt shard exited %d:\n%s"
                  % (rc, out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish("ok: dcp save/async_save/load over firebreak checkpoints, verified")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        faulthandler.enable()   # an abort shows where, in the rank's stderr
        worker(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
        # No interpreter teardown: torch 2.15's aborted in CI runs after
        # correct results (see replicated.py's leave()).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    else:
        main()
