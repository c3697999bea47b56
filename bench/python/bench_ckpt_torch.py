"""bench_ckpt_torch.py -- what a checkpoint costs the training loop, from
Python through the firebreak package, beside PyTorch's own ways to save
(docs/bench.md, "The Python path").

State: a transformer-like set of float32 parameters plus AdamW's two
moments (--size MiB in all, default 1024), in one process.  Two
training-like steps over every parameter and moment tensor:

  rw         reads every tensor (a forward/backward pass: t.sum()), then
             writes every one (the optimizer: t.mul_(0.999).add_(1e-6));
  overwrite  overwrites every tensor at once (t.copy_(source)).

For each method and each step, --saves saves (default 20; 3 with --quick).
A method that returns before the checkpoint is durable (firebreak,
dcp.async_save) has every other save preceded by a plain step (the
baseline pool) and each followed by steps until the checkpoint is durable
(at least one); a method durable when it returns has no steps around it
(its cost is the call):

  cost     the save call + (the steps after it, up to the one during which
           the checkpoint became durable) - as many times the median plain
           step (0 when less: the load's noise): the save call plus the
           slowdown it caused;
  returns  the save call alone (the stall);
  durable  save call to durable (committed and fsynced).

Methods: firebreak Checkpointer (snapshot "copy" and "protect"; "protect"
skipped where userfaultfd is missing), torch.save + fsync, dcp.save,
dcp.async_save (default stager, and one reused DefaultStager),
safetensors save_file + fsync, dcp.save with firebreak.dcp.StorageWriter:
each where this torch has it.  Every method is opened and warmed with one
save once (one step after it, then waited for), then measured with both
steps; a method durable when it returns runs no step around its saves, so
its saves are measured once and shown in both tables.  Each phase's time
(method and step, fio, restores, 2 ranks) is printed, and all of them
beside the whole run's at the end (make bench has 20 minutes for
everything).

Then, in the same run: fio's sequential write + fsync of the same bytes
(the baseline of time to durable); restore, cold (page cache dropped with
POSIX_FADV_DONTNEED), by firebreak, torch.load and dcp.load, taking turns
with fio's cold read of the same bytes (its baseline), into a fresh
state as a restarted program has one (the model's initial parameters,
AdamW's moments zero; reset before each restore) and, printed beside,
into the trained state of this process (a rollback); and 2 ranks
(gloo, spawned processes) with a state of at most 256 MiB replicated
(DDP): bytes each
rank writes, firebreak's Checkpointer (written once per group) against
dcp.save's, and each one's save call and time to durable (2 saves after
a warm one: no target rests on them).

Targets (issues 14 and 15), each printed as one line
  TARGET name measured baseline ratio limit PASS|MISS
and recorded with bench/result.py when that exists; exit 1 on a miss:
  cost_rw         firebreak's best cost, rw step      <= 0.5 x the best other's
  cost_overwrite  same, overwrite step                 <= 1.0 x the best other's
  stall           firebreak's save call               <= 0.05 x torch.save's
  durable         firebreak's time to durable, p50     <= 1.1 x fio write+fsync, best of 5
  durable_p90     that method's time to durable, p90   <= 1.5 x its p50
  durable_max     same, its slowest save               <= 3 x its p50
  restore         firebreak's restore, cold, fresh     <= 1.0 x the best of torch.load
                                                          and dcp.load (cold)
  restore_fio     same                                 <= 1/0.95 x fio's cold read

Usage: bench_ckpt_torch.py DIR [--size MIB] [--saves N] [--quick]
                           [--ranks 0|2] [--no-targets] [--restore-only]
"""
import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import warnings

import torch

import firebreak

HERE = os.path.dirname(os.path.abspath(__file__))
now = time.perf_counter


# -- the state --------------------------------------------------------------

class Model(torch.nn.Module):
    """Parameters shaped like a transformer's (attention, MLP, norms),
    enough layers to make `mib` MiB together with AdamW's two moments."""

    def __init__(self, mib):
        super().__init__()
        d = 1024 if mib >= 256 else 128
        per_layer = 12 * d * d + 4 * d            # q k v o, 2 MLP of 4d, 2 norms
        want = mib * 2**20 // (3 * 4)             # parameters: 3 copies of float32
        layers = max(1, -(-(want - 8 * d * d) // per_layer))      # at least mib
        g = torch.Generator().manual_seed(1)
        self.register_parameter("embed", torch.nn.Parameter(torch.randn(8 * d, d, generator=g)))
        for i in range(layers):
            for n, shape in (("wq", (d, d)), ("wk", (d, d)), ("wv", (d, d)), ("wo", (d, d)),
                             ("w1", (4 * d, d)), ("w2", (d, 4 * d)),
                             ("ln1", (d,)), ("ln1b", (d,)), ("ln2", (d,)), ("ln2b", (d,))):
                self.register_parameter("l%d_%s" % (i, n),
                                        torch.nn.Parameter(torch.randn(*shape, generator=g)))


def make_state(mib):
    model = Model(mib)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()                                     # creates (and faults in) the moments
    for p in model.parameters():
        p.grad = None
    tensors = [p.data for p in model.parameters()]
    for st in opt.state.values():
        tensors += [st["exp_avg"], st["exp_avg_sq"]]
    return model, opt, tensors


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


class Steps:
    """The two training-like steps over `tensors`.  before_write: the
    method's hook run between the reads and the writes (a stager that must
    finish before the state changes)."""

    def __init__(self, tensors):
        self.tensors = tensors
        self.source = None

    def prepare(self, kind):
        if kind == "overwrite" and self.source is None:
            self.source = [t.clone() for t in self.tensors]     # faulted in by clone

    def run(self, kind, before_write):
        with torch.no_grad():
            if kind == "rw":
                acc = 0.0
                for t in self.tensors:
                    acc += float(t.sum())
                before_write()
                for t in self.tensors:
                    t.mul_(0.999).add_(1e-6)
                return acc
            before_write()
            for t, s in zip(self.tensors, self.source):
                t.copy_(s)
            return 0.0


# -- methods ----------------------------------------------------------------
# Each: save(step) returns after the call; then durable_at() is the
# perf_counter time the checkpoint became durable, or None while it is not;
# before_write() blocks until the state may change (staging done);
# collect() joins what is left; close().


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path):
    fsync_path(path)


class Sync:
    """Base of the methods that are durable when save returns."""
    sync = True

    def __init__(self, root, state):
        self.root, self.state = root, state
        self.done_at = None
        self.paths = []
        os.makedirs(root, exist_ok=True)

    def save(self, step):
        self.done_at = None
        path = self._save(step)
        self.done_at = now()
        self.paths.append(path)

    def _remove(self, path):
        if dist_up():
            import torch.distributed as dist
            if dist.get_rank() != 0:
                return                      # a directory the ranks share
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.unlink(path)

    def durable_at(self):
        return self.done_at

    def before_write(self):
        pass

    def collect(self):
        while len(self.paths) > 2:          # keep 2, as the engine does (untimed)
            self._remove(self.paths.pop(0))

    def close(self):
        pass


class TorchSave(Sync):
    name = "torch.save+fsync"

    def _save(self, step):
        path = os.path.join(self.root, "step-%d.pt" % step)
        sd = {"model": self.state["model"].state_dict(),
              "optim": self.state["optim"].state_dict()}
        with open(path, "wb") as f:
            torch.save(sd, f)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.root)
        return path


class Safetensors(Sync):
    name = "safetensors+fsync"

    def _save(self, step):
        from safetensors.torch import save_file
        path = os.path.join(self.root, "step-%d.safetensors" % step)
        flat = {"model/" + k: v for k, v in self.state["model"].state_dict().items()}
        for i, st in self.state["optim"].state_dict()["state"].items():
            for k, v in st.items():
                if v.dim() > 0:
                    flat["optim/%d/%s" % (i, k)] = v
        save_file(flat, path)
        fsync_path(path)
        fsync_dir(self.root)
        return path


def dcp_state(state):
    return {"model": state["model"].state_dict(), "optim": state["optim"].state_dict()}


class DcpSave(Sync):
    name = "dcp.save"

    def _save(self, step):
        import torch.distributed.checkpoint as dcp
        path = os.path.join(self.root, "step-%d" % step)
        dcp.save(dcp_state(self.state), checkpoint_id=path, no_dist=not dist_up())
        return path


class FbDcp(Sync):
    name = "dcp.save+firebreak.dcp"

    def _save(self, step):
        import torch.distributed.checkpoint as dcp
        from firebreak.dcp import StorageWriter
        dcp.save(dcp_state(self.state), storage_writer=StorageWriter(self.root, step=step),
                 no_dist=not dist_up())
        return None                         # the writer keeps 2 itself

    def _remove(self, path):
        pass


class DcpAsync(Sync):
    """dcp.async_save: durable when its future is done."""
    sync = False

    def __init__(self, root, state, stager=False):
        super().__init__(root, state)
        self.fut = None
        self.stager = None
        self.name = "dcp.async_save"
        if stager:
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
            self.stager = DefaultStager(StagingOptions(False, False, False, False))
            self.name = "dcp.async_save+stager"

    def save(self, step):
        import torch.distributed.checkpoint as dcp
        self.done_at = None
        path = os.path.join(self.root, "step-%d" % step)
        kw = {"async_stager": self.stager} if self.stager is not None else {}
        fut = dcp.async_save(dcp_state(self.state), checkpoint_id=path,
                             no_dist=not dist_up(), **kw)
        self.staging = None
        if hasattr(fut, "upload_completion"):        # AsyncSaveResponse
            self.staging, fut = fut.staging_completion, fut.upload_completion
        self.fut = fut
        fut.add_done_callback(self._done)
        self.paths.append(path)

    def _done(self, fut):
        self.done_at = now()

    def before_write(self):
        if self.staging is not None:
            self.staging.result()

    def collect(self):
        if self.fut is not None:
            self.fut.result()
            self.fut = None
        while len(self.paths) > 2:
            self._remove(self.paths.pop(0))

    def close(self):
        self.collect()
        if self.stager is not None:
            self.stager.close()


class Firebreak:
    """firebreak.Checkpointer; durable when its wait() returns (called on a
    thread of the bench, the loop goes on meanwhile)."""
    sync = False

    def __init__(self, root, state, snapshot, **kw):
        self.name = "firebreak " + snapshot
        self.ck = firebreak.Checkpointer(state, dir=root, snapshot=snapshot, keep=2, **kw)
        self.done_at = None
        self.thread = None
        self.err = None

    def save(self, step):
        self.done_at = None
        self.ck.save(step)
        self.thread = threading.Thread(target=self._watch)
        self.thread.start()

    def _watch(self):
        try:
            self.ck.wait()
        except Exception as e:   # reported by collect()
            self.err = e
        self.done_at = now()

    def durable_at(self):
        return self.done_at

    def before_write(self):
        pass

    def collect(self):
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.err is not None:
            raise self.err

    def close(self):
        self.collect()
        self.ck.close()


def dist_up():
    import torch.distributed as dist
    return dist.is_available() and dist.is_initialized()


def has_dcp():
    try:
        import torch.distributed.checkpoint as dcp
        return hasattr(dcp, "async_save") and hasattr(dcp, "save")
    except Exception:
        return False


def has_stager():
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions  # noqa
        return True
    except Exception:
        return False


def has_safetensors():
    try:
        import safetensors.torch  # noqa
        return True
    except Exception:
        return False


def has_protect(root, state):
    try:
        firebreak.Checkpointer({"probe": torch.zeros(4)}, dir=root, snapshot="protect").close()
        return True
    except Exception:
        return False


def has_fbdcp():
    try:
        import firebreak.dcp  # noqa
        return True
    except Exception:
        return False


# -- measuring --------------------------------------------------------------

def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(xs):
    return {"p50": pct(xs, 0.5), "p90": pct(xs, 0.9), "max": max(xs) if xs else float("nan")}


def measure(method, steps, kind, saves, first_step, warm=True):
    """saves saves with `kind` steps (after one more that warms the method,
    when warm); returns {cost, returns, durable: [..], plain: [...], steps:
    [...]} in seconds."""
    steps.prepare(kind)
    noop = lambda: None  # noqa: E731
    out = {"cost": [], "returns": [], "durable": [], "plain": [], "steps_after": []}
    step_no = first_step
    first = 0 if warm else 1
    for i in range(first, saves + 1):        # i == 0 warms the method
        plain = None
        # A plain step before every other save (and the warming one): the
        # baseline is their median (10 steps of 20 saves, not 20).  The
        # other saves follow the previous save's last step, a step all the
        # same.
        if not method.sync and (i == 0 or i % 2 == 1):
            a = now()
            steps.run(kind, noop)
            plain = now() - a
        step_no += 1
        t0 = now()
        method.save(step_no)
        t1 = now()
        n, t_end = 0, t1
        # Steps until the checkpoint is durable: none after a method that is
        # durable when it returns (its whole cost is the call); one after
        # the warming save (its figures are not kept: the step warms what a
        # step beside a save touches, faults and staging, then collect()
        # waits for durable without steps, which come later otherwise).
        while not method.sync:
            steps.run(kind, method.before_write)
            t_end = now()
            n += 1
            if method.durable_at() is not None or n >= 10000 or i == 0:
                break
        method.collect()
        d = method.durable_at()
        if i == 0:
            continue
        if plain is not None:
            out["plain"].append(plain)
        out["returns"].append(t1 - t0)
        out["durable"].append(d - t0)
        out["steps_after"].append(n)
        out["_span"] = out.get("_span", []) + [(t1 - t0, t_end - t1, n)]
    base = statistics.median(out["plain"]) if out["plain"] else 0.0
    out["base"] = base
    # the save call, plus what the steps after it took beyond as many plain
    # steps; a step faster than the median is the load's noise, not a gain
    out["cost"] = [call + max(0.0, after - n * base) for call, after, n in out.pop("_span")]
    return out, step_no


def fio_run(root, rw, nbytes_):
    """One fio sequential run (rw: write, with fsync at the end, or read)
    of fio.dat in root: seconds, or None."""
    try:
        r = subprocess.run(["fio", "--name=fbbench", "--directory=" + root,
                            "--filename=fio.dat", "--rw=" + rw,
                            "--bs=%s" % ("8M" if nbytes_ >= 64 << 20 else "64k"),
                            "--size=%d" % nbytes_, "--ioengine=psync", "--end_fsync=1",
                            "--output-format=json"],
                           capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    doc = json.loads(r.stdout[r.stdout.index("{"):])
    bw = doc["jobs"][0][rw]["bw_bytes"]
    return nbytes_ / bw if bw > 0 else None


def fio_write(root, nbytes_, writes=5):
    """fio's sequential write + fsync of a new file of nbytes_, `writes`
    times: (the writes' best, their median, the file's path), seconds, None
    where fio is missing or failed.  The file is left for the cold reads
    restore_times() makes between the restores (the caller removes it).
    The best write is what firebreak's median time to durable is held
    against: the disk's own speed.  The median is printed beside it and not
    used: five writes back to back, each after the last one's file was
    deleted, ran 0.81-2.98 s in one run on this VM's disk, slower than any
    of firebreak's saves, which are spaced by training steps."""
    path = os.path.join(root, "fio.dat")
    w = []
    for _ in range(writes):
        if os.path.exists(path):
            os.unlink(path)
        s = fio_run(root, "write", nbytes_)
        if s is None:
            if os.path.exists(path):
                os.unlink(path)
            return None, None, None
        w.append(s)
    return min(w), statistics.median(w), path


def drop_cache(root):
    """Cold: every file under root (or root itself, a file) written back
    and dropped from the page cache with POSIX_FADV_DONTNEED, the same way
    before each method's restore and fio's read (not the whole machine's
    cache, which /proc/sys/vm/drop_caches would drop for every user)."""
    walk = os.walk(root) if os.path.isdir(root) else [(os.path.dirname(root), [],
                                                        [os.path.basename(root)])]
    for d, _, files in walk:
        for f in files:
            p = os.path.join(d, f)
            try:
                fd = os.open(p, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def dir_bytes(root, pred=lambda p: True):
    total = 0
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if pred(p):
                total += os.path.getsize(p)
    return total


def fresh_state(mib):
    """A restarted program's state before its restore: the model as
    constructed, AdamW's moments as its first step makes them (zero); and
    reset(), which puts both back (untimed, before each restore)."""
    model, opt, tensors = make_state(mib)
    params = [p.data for p in model.parameters()]
    init = [t.clone() for t in params]
    moments = [t for t in tensors[len(params):]]

    def reset():
        with torch.no_grad():
            for t, i in zip(params, init):
                t.copy_(i)
            for t in moments:
                t.zero_()
    return {"model": model, "optim": opt}, reset


def restore_times(root, state, tries, reset=lambda: None, fio=None):
    """Cold restore of the last checkpoint each method left, into state
    (reset() before each), and, where fio is (path, bytes), fio's cold read
    of that file as "fio read": seconds, best of tries; entries missing
    where the method is.  The methods take turns, one try each per round,
    each round starting one method later: this VM's disk reads 1 GiB cold
    in 0.44-1.3 s from one minute to the next, and methods measured one
    after another in blocks of tries each got whatever minute was theirs."""
    timed = []
    if fio is not None:
        def fr():
            if fio_run(os.path.dirname(fio[0]), "read", fio[1]) is None:
                raise RuntimeError("fio read of %s failed" % fio[0])
        timed.append(("fio read", fio[0], fr))
    fbdir = os.path.join(root, "firebreak-copy")
    if os.path.isdir(fbdir):
        def fb():
            with firebreak.Checkpointer(state, dir=fbdir) as ck:
                if ck.restore() is None:
                    raise RuntimeError("firebreak: nothing to restore in " + fbdir)
        timed.append(("firebreak", fbdir, fb))
    tsdir = os.path.join(root, "torch.save")
    pts = sorted(os.listdir(tsdir), key=lambda n: int(n[5:-3])) if os.path.isdir(tsdir) else []
    if pts:
        path = os.path.join(tsdir, pts[-1])

        def tl():
            # torch 2's default, safe loading; 1.13's cannot read an optimizer's state
            kw = {"weights_only": True} if int(torch.__version__.split(".")[0]) >= 2 else {}
            sd = torch.load(path, **kw)
            state["model"].load_state_dict(sd["model"])
            state["optim"].load_state_dict(sd["optim"])
        timed.append(("torch.load", path, tl))
    dcdir = os.path.join(root, "dcp.save")
    steps_ = sorted(os.listdir(dcdir), key=lambda n: int(n[5:])) if os.path.isdir(dcdir) else []
    if steps_:
        import torch.distributed.checkpoint as dcp
        path = os.path.join(dcdir, steps_[-1])

        def dl():
            sd = dcp_state(state)
            dcp.load(sd, checkpoint_id=path, no_dist=True)
            state["model"].load_state_dict(sd["model"])
            state["optim"].load_state_dict(sd["optim"])
        timed.append(("dcp.load", path, dl))
    out = {}
    for r in range(tries):
        for k in range(len(timed)):
            name, path, fn = timed[(r + k) % len(timed)]
            reset()
            drop_cache(path)
            a = now()
            fn()
            s = now() - a
            out[name] = min(out.get(name, s), s)
    return out


def first_save_after_restore(root, state, saves=3):
    """A restart's first save: a new Checkpointer restores the copy
    method's checkpoint (cold), one rw step runs, then `saves` saves, a
    step before each, each waited for.  (restore seconds, [each save
    call's seconds]): the first against the later ones is the start-up
    cost a restart pays in its first save (issue 14, item 3); None
    without a firebreak checkpoint."""
    fbdir = os.path.join(root, "firebreak-copy")
    if not os.path.isdir(fbdir):
        return None
    drop_cache(fbdir)
    calls = []
    a = now()
    with firebreak.Checkpointer(state, dir=fbdir, snapshot="copy") as ck:
        step = ck.restore()
        if step is None:
            raise RuntimeError("firebreak: nothing to restore in " + fbdir)
        rs = now() - a
        # the state's tensors now (torch.load's restore above replaced
        # the optimizer's moments)
        steps = Steps([p.data for p in state["model"].parameters()] +
                      [t for st in state["optim"].state.values()
                       for t in (st["exp_avg"], st["exp_avg_sq"])])
        for i in range(saves):
            steps.run("rw", lambda: None)
            a = now()
            ck.save(step + 1 + i)
            calls.append(now() - a)
            ck.wait()
    return rs, calls


# -- two ranks, replicated ----------------------------------------------------

def rank_main(rank, world, init, root, mib, saves, q):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    try:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
        model, opt, tensors = make_state(mib)
        ddp = DDP(model)
        state = {"model": ddp, "optim": opt}
        steps = Steps(tensors)
        res = {}
        # rank and world size given: the package reads them from the
        # environment (RANK, as torchrun sets it), which spawn does not set
        methods = [("firebreak", lambda r: Firebreak(r, state, "copy", rank=rank,
                                                     world_size=world))]
        if has_dcp():
            dstate = {"model": model, "optim": opt}
            methods.append(("dcp.save", lambda r: DcpSave(r, dstate)))
        step_no = 0
        for name, make in methods:
            r = os.path.join(root, "ranks2", name)
            m = make(r)
            dist.barrier()
            got, step_no = measure(m, steps, "rw", saves, step_no)
            m.close()
            dist.barrier()
            # this rank's file(s) of the newest checkpoint (step-N directories)
            last = os.path.join(r, max((d for d in os.listdir(r) if d.startswith("step-")),
                                       key=lambda d: int(d[5:])))
            if name == "firebreak":
                mine = dir_bytes(last, lambda p: p.endswith("rank-%05d.safetensors" % rank))
            else:
                mine = dir_bytes(last, lambda p: os.path.basename(p).startswith("__%d_" % rank))
            res[name] = {"bytes": mine, "returns": got["returns"], "durable": got["durable"],
                         "cost": got["cost"], "state_bytes": nbytes(tensors)}
        q.put((rank, res))
        dist.destroy_process_group()
    except BaseException as e:
        q.put((rank, "error: %r" % (e,)))
        raise


def two_ranks(root, mib, saves):
    import tempfile
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    fd, initf = tempfile.mkstemp(prefix="fbbench-init-")
    os.close(fd)
    os.unlink(initf)
    procs = [ctx.Process(target=rank_main, args=(r, 2, "file://" + initf, root, mib, saves, q))
             for r in range(2)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in procs:
            rank, res = q.get(timeout=600)
            got[rank] = res
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
        if os.path.exists(initf):
            os.unlink(initf)
    for r in (0, 1):
        if not isinstance(got.get(r), dict):
            raise RuntimeError("rank %d: %s" % (r, got.get(r)))
    return got


# -- targets ----------------------------------------------------------------

targets = []
BENCH = "bench_ckpt_torch"
phases = []        # (name, wall seconds): where the run's own time goes
RANKS_MIB = 256    # the 2-rank part's state, MiB at most


def phase(name, t0):
    """Record and print one phase of the run: `name` took now() - t0."""
    s = now() - t0
    phases.append((name, s))
    print("phase %s: %.1f s" % (name, s), flush=True)
    return s


def record(name, what, measured, baseline, limit, unit="s"):
    """One target: a TARGET line, and bench/result.py's record where it exists."""
    ratio = measured / baseline if baseline > 0 else float("inf")
    ok = ratio <= limit
    targets.append({"name": name, "what": what, "measured": measured, "baseline": baseline,
                    "ratio": ratio, "limit": limit, "met": ok})
    print("TARGET %s %.4f %.4f %.3f %.3f %s" % (name, measured, baseline, ratio, limit,
                                                 "PASS" if ok else "MISS"))
    try:
        sys.path.insert(0, os.path.dirname(HERE))
        import result  # bench/result.py ("benchmarks that can fail")
        result.target(BENCH, what, "%.4f %s" % (measured, unit),
                      "%.4f %s" % (baseline, unit), "<= %.2fx" % limit, ok)
    except ImportError:
        pass
    finally:
        sys.path.pop(0)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="where to write (removed and made again)")
    ap.add_argument("--size", type=int, default=1024, help="MiB of state (default 1024)")
    ap.add_argument("--saves", type=int, default=None, help="saves per method and step (20)")
    ap.add_argument("--quick", action="store_true", help="3 saves, fewer restores")
    ap.add_argument("--ranks", type=int, default=2, choices=(0, 2),
                    help="2: also the 2-rank replicated case; 0: skip it")
    ap.add_argument("--no-targets", action="store_true", help="print targets, never fail")
    ap.add_argument("--restore-only", action="store_true",
                    help="one save per method that restores, then only the restores "
                         "and their targets")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--name", default="bench_ckpt_torch", help="the bench's name in the results file")
    a = ap.parse_args()
    global BENCH
    BENCH = a.name
    saves = a.saves or (3 if a.quick else 20)
    # DCP's notes that it runs in one process, on every call
    warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
    root = os.path.abspath(a.dir)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    t_start = now()

    t_x = now()
    model, opt, tensors = make_state(a.size)
    state = {"model": model, "optim": opt}
    total = nbytes(tensors)
    print("bench_ckpt_torch: torch %s, python %s, %d torch threads; state %.1f MiB in %d "
          "tensors (parameters + AdamW moments), one process; %d saves per method and step"
          % (torch.__version__, sys.version.split()[0], torch.get_num_threads(),
             total / 2**20, len(tensors) + len(opt.state), saves), flush=True)

    makers = [("firebreak copy", lambda r: Firebreak(r, state, "copy"), "firebreak-copy")]
    missing = []
    if has_protect(os.path.join(root, "probe"), state):
        makers.append(("firebreak protect", lambda r: Firebreak(r, state, "protect"),
                       "firebreak-protect"))
    else:
        missing.append("firebreak protect (no userfaultfd)")
    shutil.rmtree(os.path.join(root, "probe"), ignore_errors=True)
    makers.append(("torch.save+fsync", lambda r: TorchSave(r, state), "torch.save"))
    if has_dcp():
        makers += [("dcp.save", lambda r: DcpSave(r, state), "dcp.save"),
                   ("dcp.async_save", lambda r: DcpAsync(r, state), "dcp.async_save")]
        if has_stager():
            makers.append(("dcp.async_save+stager", lambda r: DcpAsync(r, state, True),
                           "dcp.async_save-stager"))
        else:
            missing.append("dcp.async_save with DefaultStager (not in this torch)")
    else:
        missing.append("dcp.save, dcp.async_save, dcp.async_save with DefaultStager "
                       "(no torch.distributed.checkpoint of that interface)")
    if has_safetensors():
        makers.append(("safetensors+fsync", lambda r: Safetensors(r, state), "safetensors"))
    else:
        missing.append("safetensors (package not installed)")
    if has_dcp() and has_fbdcp():
        makers.append(("dcp.save+firebreak.dcp", lambda r: FbDcp(r, state), "firebreak.dcp"))
    else:
        missing.append("firebreak.dcp StorageWriter (needs torch 2.x DCP)")
    for m in missing:
        print("skipped: %s" % m)
    phase("state and probes", t_x)

    steps = Steps(tensors)
    results = {}
    step_no = 0
    if a.restore_only:
        t_x = now()
        for name, make, sub in makers:
            if sub in ("firebreak-copy", "torch.save", "dcp.save"):
                m = make(os.path.join(root, sub))
                try:
                    m.save(1)
                    m.collect()
                finally:
                    m.close()
        phase("one save per restoring method", t_x)
        a.ranks = 0
    # Each method opened and warmed once, then both steps.  A method durable
    # when it returns runs no step around its saves (its whole cost is the
    # call), so the step cannot change what it measures: its saves are
    # measured once and shown in both tables.
    if not a.restore_only:
        print("(a method durable when its save returns runs no step around it: its "
              "saves are measured once and shown in both tables)", flush=True)
    for name, make, sub in (() if a.restore_only else makers):
        t_m = now()
        m = make(os.path.join(root, sub))
        kinds = ("rw",) if m.sync else ("rw", "overwrite")
        try:
            for j, kind in enumerate(kinds):
                t_k = now()
                got, step_no = measure(m, steps, kind, saves, step_no, warm=j == 0)
                results[(kind, name)] = got
                phase("%s, %s%s" % (name, kind, ", opened and warmed" if j == 0 else ""),
                      t_m if j == 0 else t_k)
        finally:
            m.close()
        gc.collect()
        if m.sync:
            results[("overwrite", name)] = results[("rw", name)]
        print("measured %s: %d saves, %.0f s (elapsed %.0f s)"
              % (name, (saves + 1) if m.sync else (2 * saves + 1), now() - t_m,
                 now() - t_start), flush=True)
    for kind in (() if a.restore_only else ("rw", "overwrite")):
        print("\nstep %s: %s" % (kind, "reads every tensor, then writes every one"
                                 if kind == "rw" else "overwrites every tensor at once (copy_)"))
        print("%-24s %8s | %-23s | %-23s | %-23s | %s" % (
            "method", "step", "whole cost p50/p90/max", "save returns p50/p90/max",
            "durable p50/p90/max", "steps"))
        for name, make, sub in makers:
            got = results[(kind, name)]
            c, r, d = summary(got["cost"]), summary(got["returns"]), summary(got["durable"])
            print("%-24s %8s | %6.3f %6.3f %7.3f   | %6.3f %6.3f %7.3f   | %6.3f %6.3f "
                  "%7.3f   | %s" % (name, "%.3f" % got["base"] if got["plain"] else "-", c["p50"], c["p90"], c["max"],
                                      r["p50"], r["p90"], r["max"], d["p50"], d["p90"],
                                      d["max"], "%.1f" % statistics.mean(got["steps_after"])
                                      if got["plain"] else "-"),
                  flush=True)

    t_x = now()
    fio_s, fio_med, fio_path = fio_write(root, total)
    print("\nfio write+fsync of %.1f MiB: %s" % (total / 2**20,
                                                  "best of 5 %.3f s (%.2f GB/s), p50 %.3f s"
                                                  % (fio_s, total / fio_s / 1e9, fio_med)
                                                  if fio_s else "unavailable"))
    phase("fio", t_x)
    t_y = now()
    fresh, reset = fresh_state(a.size)
    tries = 1 if a.quick else 3
    try:
        rest = restore_times(root, fresh, tries, reset, (fio_path, total) if fio_path else None)
    finally:
        if fio_path and os.path.exists(fio_path):
            os.unlink(fio_path)
    del fresh, reset
    fio_r = rest.pop("fio read", None)
    print("fio read, cold, of %.1f MiB, best of %d (turn about with the restores): %s"
          % (total / 2**20, tries, "%.3f s (%.2f GB/s)" % (fio_r, total / fio_r / 1e9)
             if fio_r else "unavailable"))
    print("restore, cold (page cache dropped), into a fresh state (a restart's), best of "
          "%d: %s" % (tries, ", ".join("%s %.3f s" % kv for kv in rest.items())))
    live = restore_times(root, state, 1 if a.quick else 2)
    print("restore, cold, into this process's trained state (a rollback; no target), best of "
          "%d: %s" % (1 if a.quick else 2, ", ".join("%s %.3f s" % kv for kv in live.items())))
    phase("restores", t_y)
    t_y = now()
    first = first_save_after_restore(root, state)
    if first:
        later = statistics.median(first[1][1:])
        print("first save after a restore (new Checkpointer, cold restore %.3f s, one step): "
              "call %.3f s against the later saves' median %.3f s (%.2fx; no target here, "
              "bench_ckpt's start-up rows have it)" % (first[0], first[1][0], later,
                                                       first[1][0] / later))
    phase("first save after a restore", t_y)
    print("(fio and restores: %.0f s; elapsed %.0f s)" % (now() - t_x, now() - t_start))

    ranks = None
    if a.ranks == 2:
        # bytes per rank (the newest checkpoint's) and a glance at the cost:
        # 2 saves after the warm one, on a state of at most RANKS_MIB (the
        # bytes written once hold at any size); no target rests on these
        t_x = now()
        ranks = two_ranks(root, min(a.size, RANKS_MIB), 2)
        phase("2 ranks", t_x)
        one = ranks[0]["firebreak"]["state_bytes"]
        print("\n2 ranks (gloo, spawned), DDP state of %.1f MiB replicated, step rw, %d saves "
              "each (%.0f s):" % (one / 2**20, 2, now() - t_x))
        for name in ranks[0]:
            b = [ranks[r][name]["bytes"] for r in (0, 1)]
            ret = summary(ranks[0][name]["returns"] + ranks[1][name]["returns"])
            dur = summary(ranks[0][name]["durable"] + ranks[1][name]["durable"])
            cost = summary(ranks[0][name]["cost"] + ranks[1][name]["cost"])
            print("  %-10s bytes per rank %.1f + %.1f MiB (one copy %.1f MiB); whole cost p50 "
                  "%.3f s; save returns p50 %.3f s; durable p50 %.3f s"
                  % (name, b[0] / 2**20, b[1] / 2**20, one / 2**20, cost["p50"],
                     ret["p50"], dur["p50"]))

    # -- targets
    print()
    ok = True
    fb = [n for n, _, _ in makers if n.startswith("firebreak")]
    for kind, tname, limit in (() if a.restore_only else
                               (("rw", "cost_rw", 0.5), ("overwrite", "cost_overwrite", 1.0))):
        mine = min(fb, key=lambda n: statistics.median(results[(kind, n)]["cost"]))
        others = [n for n, _, _ in makers if not n.startswith("firebreak")]
        best = min(others, key=lambda n: statistics.median(results[(kind, n)]["cost"]))
        mv = statistics.median(results[(kind, mine)]["cost"])
        bv = statistics.median(results[(kind, best)]["cost"])
        print("%s: %s p50 %.3f s against %s p50 %.3f s" % (tname, mine, mv, best, bv))
        ok &= record(tname, "whole cost, %s step (%s vs %s)" % (kind, mine, best), mv, bv, limit)
    others = [n for n in ("torch.load", "dcp.load") if n in rest]
    if "firebreak" in rest and others:
        best = min(others, key=lambda n: rest[n])
        print("restore: firebreak %.3f s against %s %.3f s, cold" % (
            rest["firebreak"], best, rest[best]))
        ok &= record("restore", "restore, cold (firebreak vs %s)" % best,
                     rest["firebreak"], rest[best], 1.0)
    if "firebreak" in rest and fio_r:
        print("restore: firebreak %.3f s against fio read %.3f s, cold" % (
            rest["firebreak"], fio_r))
        ok &= record("restore_fio", "restore, cold (firebreak vs fio read)",
                     rest["firebreak"], fio_r, 1 / 0.95)
    if a.restore_only:
        fio_s = None
    else:
        mine = min(fb, key=lambda n: statistics.median(results[("rw", n)]["returns"]))
        mv = statistics.median(results[("rw", mine)]["returns"])
        tv = statistics.median(results[("rw", "torch.save+fsync")]["returns"])
        print("stall: %s save returns p50 %.4f s against torch.save+fsync %.3f s"
              % (mine, mv, tv))
        ok &= record("stall", "save call, rw step (%s vs torch.save)" % mine, mv, tv, 0.05)
    if fio_s:
        mine = min(fb, key=lambda n: statistics.median(results[("rw", n)]["durable"]))
        mv = statistics.median(results[("rw", mine)]["durable"])
        print("durable: %s p50 %.3f s against fio write+fsync best %.3f s" % (mine, mv, fio_s))
        ok &= record("durable", "time to durable, p50 (%s vs fio write+fsync, best)" % mine,
                     mv, fio_s, 1.1)
    if not a.restore_only:
        # the spread of firebreak's saves (issue 14: p90 <= 1.5x p50, none
        # over 3x p50), time to durable of the method the durable target
        # chose (else the cheapest by p50), rw step
        mine = min(fb, key=lambda n: statistics.median(results[("rw", n)]["durable"]))
        d = summary(results[("rw", mine)]["durable"])
        print("durable spread: %s p50 %.3f s, p90 %.3f s, max %.3f s" % (mine, d["p50"], d["p90"],
                                                                      d["max"]))
        ok &= record("durable_p90", "time to durable, p90 against p50 (%s)" % mine,
                     d["p90"], d["p50"], 1.5)
        ok &= record("durable_max", "time to durable, slowest save against p50 (%s)" % mine,
                     d["max"], d["p50"], 3.0)
    elif not a.restore_only:
        print("durable: fio unavailable, no target")
    if a.json:
        doc = {"torch": torch.__version__, "bytes": total, "saves": saves,
               "skipped": missing, "fio_write_s": fio_s, "fio_write_p50_s": fio_med,
               "fio_read_s": fio_r,
               "restore_s": rest, "restore_live_s": live,
               "first_save_after_restore_s": first,
               "targets": targets,
               "methods": [{"name": n, "step": k, "base_s": g["base"],
                            "cost_s": g["cost"], "returns_s": g["returns"],
                            "durable_s": g["durable"], "steps_after": g["steps_after"]}
                           for (k, n), g in results.items()],
               "ranks2": ranks}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    t_x = now()
    shutil.rmtree(root, ignore_errors=True)
    phase("clean-up", t_x)
    total_s = now() - t_start
    print("phases: %s; accounted %.0f of %.0f s" % (
        ", ".join("%s %.0f s" % p for p in phases), sum(s for _, s in phases), total_s))
    print("\nbench_ckpt_torch: %s, %.0f s" % ("all targets met" if ok else "some targets missed",
                                             now() - t_start))
    return 0 if ok or a.no_targets else 1


if __name__ == "__main__":
    sys.exit(main())
