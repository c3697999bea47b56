#!/usr/bin/env python3
"""Real PyTorch flight-recorder dumps from a 4-process gloo job.

Needs torch >= 2.8 (ProcessGroupGloo records into the generic
FlightRecorder, dumped by torch._C._distributed_c10d._dump_fr_trace and
_dump_fr_trace_json).  Not run by the tests: the dumps it made are
committed under tests/fr/data/torch_real/<torch version>/.

    python gen_real_dumps.py OUTDIR

Every rank runs ALL_REDUCES all_reduces on the world group, except that
rank SKIPPER never calls all_reduce number SKIP_AT (it goes on to dump
without it).  The others block in that all_reduce.  After WAIT seconds,
every rank dumps its recorder, as a pickle to OUTDIR/pickle/ and as JSON
to OUTDIR/json/, each file named nccl_trace_rank_<R> (PyTorch's default
prefix), waits until every rank has dumped, and leaves with os._exit so
that no blocked gloo thread keeps it alive.  The parent kills any rank
still alive after DEADLINE seconds.

    python -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.10.0
    /tmp/torchvenv/bin/python gen_real_dumps.py ../data/torch_real/2.10.0
    bash compare.sh /tmp/torchvenv/bin/python FIREBREAK ../data/torch_real/2.10.0
"""
import os
import socket
import subprocess
import sys
import time

WORLD = 4
SKIPPER = 2
SKIP_AT = 5  # 1-based: the 5th all_reduce
ALL_REDUCES = 6
WAIT = 2.0
DEADLINE = 120.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, outdir):
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    c10d = torch._C._distributed_c10d

    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=30))
    pending = None
    for i in range(1, ALL_REDUCES + 1):
        if rank == SKIPPER and i == SKIP_AT:
            break  # the bug: this rank leaves the loop early
        t = torch.full((1024,), float(rank + i))
        if i == SKIP_AT:
            pending = dist.all_reduce(t, async_op=True)  # never completes
            break
        dist.all_reduce(t)
    time.sleep(WAIT)
    if pending is not None and pending.is_completed():
        print(f"rank {rank}: all_reduce #{SKIP_AT} completed", file=sys.stderr)
        os._exit(3)
    blobs = {
        "pickle": c10d._dump_fr_trace(True, True, False),
        "json": c10d._dump_fr_trace_json(True, False),
    }
    for kind, blob in blobs.items():
        if isinstance(blob, str):
            blob = blob.encode()
        d = os.path.join(outdir, kind)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"nccl_trace_rank_{rank}"), "wb") as f:
            f.write(blob)
    # Stay until every rank has dumped: a rank that exits closes its gloo
    # connections, and the peers' pending all_reduce would then end in an
    # error and be retired before they dump.
    done = os.path.join(outdir, f"dumped_{rank}")
    open(done, "w").close()
    end = time.monotonic() + 60
    while time.monotonic() < end and not all(
            os.path.exists(os.path.join(outdir, f"dumped_{r}")) for r in range(WORLD)):
        time.sleep(0.05)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the pending all_reduce would block a normal exit


def main():
    if len(sys.argv) == 3 and sys.argv[1].startswith("--rank="):
        worker(int(sys.argv[1].split("=", 1)[1]), sys.argv[2])
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = os.path.abspath(sys.argv[1])
    env = dict(os.environ,
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(WORLD), TORCH_FR_BUFFER_SIZE="2000",
               GLOO_SOCKET_IFNAME="lo")
    procs = []
    for r in range(WORLD):
        env_r = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), f"--rank={r}", outdir],
            env=env_r))
    end = time.monotonic() + DEADLINE
    rc = 0
    for r, p in enumerate(procs):
        try:
            code = p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = "timeout"
        if code != 0:
            print(f"rank {r}: exit {code}", file=sys.stderr)
            rc = 1
    for p in procs:  # no rank is left behind
        if p.poll() is None:
            p.kill()
            p.wait()
    for r in range(WORLD):
        try:
            os.unlink(os.path.join(outdir, f"dumped_{r}"))
        except FileNotFoundError:
            pass
    return rc


if __name__ == "__main__":
    sys.exit(main())
