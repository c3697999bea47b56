"""allreduce_loop.py -- 8-byte gloo all_reduces between the ranks of a
`firebreak run`, timed on rank 0 (bench_pyhooks.sh).  Prints
`allreduce_us=<per call>`; when the Python hooks are in, also the paired
measurement: short blocks of calls through the hooks and through the
function they wrap (`__wrapped__`, not recorded), alternated in this one
process, `paired_us=<with> <without> <cpu diff, median> <cpu diff, mean>
<without, fastest>` (wall medians over the blocks; the calling thread's
CPU time with minus without, per pair of blocks, which other processes'
load does not inflate; the fastest block without), and
`own_us=<warm> <cold>`: the hooks' own CPU per call, the same wrapper
over a function that does nothing, called back to back (warm) and one
call between real all_reduces (cold); and `reads=<in place> <asked>`:
how many tensors the hooks read in place and how many they asked torch
about (_firebreak.c, "Tensors read in place")."""
import statistics
import sys
import time

import torch
import torch.distributed as dist

n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
dist.init_process_group("gloo")
t = torch.zeros(2, dtype=torch.float32)   # 8 bytes
for _ in range(200):                      # warm-up (and the groups' first use)
    dist.all_reduce(t)
dist.barrier()
t0 = time.perf_counter()
for _ in range(n):
    dist.all_reduce(t)
dt = time.perf_counter() - t0
hooked = getattr(dist.all_reduce, "_firebreak", False)
paired = None
if hooked:
    # Short blocks through the hooks and around them (__wrapped__), their
    # order swapped every pair (neither side always follows the other);
    # each pair's difference in the calling thread's CPU time, so a block
    # that others' load or an interrupt slowed spoils one pair, not the
    # figure.
    plain, block = dist.all_reduce.__wrapped__, 100
    w, b, dcpu = [], [], []
    for i in range(max(n // block // 2, 8)):
        cpu = {}
        for f, out in ((dist.all_reduce, w), (plain, b))[::1 if i % 2 else -1]:
            s, c = time.perf_counter(), time.thread_time()
            for _ in range(block):
                f(t)
            cpu[f] = (time.thread_time() - c) / block * 1e6
            out.append((time.perf_counter() - s) / block * 1e6)
        dcpu.append(cpu[dist.all_reduce] - cpu[plain])
    paired = (statistics.median(w), statistics.median(b), statistics.median(dcpu),
              statistics.mean(dcpu), min(b))
own = None
if hooked:
    # The hooks' own CPU per call: the same wrapper (_hooks._wrap,
    # all_reduce's description) over a function that does nothing,
    # against that function, on a group of its own.  Warm: 20,000 calls
    # back to back (best of 5), everything they touch in the nearest
    # caches.  Cold: one call of each between real all_reduces (order
    # swapped each time), as a collective's hooks run: after ~100 us
    # of waiting in which other threads and processes used the core.
    from firebreak import _firebreak as fb, _hooks

    def noop(tensor, group=None, op=None, async_op=False):
        return None
    A, NUM, NO = fb.K_ARG, fb.K_NUMEL, fb.K_NONE
    rec = _hooks._H._wrap(noop, fb.OP_ALLREDUCE, 0, ("tensor", "group"),
                          ((A, 1), (A, 0), (NUM, 0), (NUM, 0), (NO, 0)))
    g = dist.new_group(list(range(dist.get_world_size())))
    best = {}
    for _ in range(5):
        for name, f in (("rec", rec), ("noop", noop)):
            c = time.thread_time()
            for _ in range(20000):
                f(t, g)
            us = (time.thread_time() - c) / 20000 * 1e6
            best[name] = min(best.get(name, us), us)
    tt, cold = time.thread_time_ns, {rec: [], noop: []}
    for i in range(2000):
        dist.all_reduce.__wrapped__(t)
        for f in (rec, noop)[::1 if i % 2 else -1]:
            c = tt()
            f(t, g)
            cold[f].append(tt() - c)
    own = (best["rec"] - best["noop"],
           (statistics.median(cold[rec]) - statistics.median(cold[noop])) / 1e3)
    reads = fb.hooks_counts()      # tensors read in place, asked of torch
    dist.barrier()
if dist.get_rank() == 0:
    print("allreduce_us=%.3f" % (dt / n * 1e6), flush=True)
    if paired:
        print("paired_us=%.3f %.3f %.3f %.3f %.3f" % paired, flush=True)
    if own is not None:
        print("own_us=%.3f %.3f" % own, flush=True)
        print("reads=%d %d" % reads, flush=True)
dist.destroy_process_group()
