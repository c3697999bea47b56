"""ddp_fault.py -- the restart bench's DDP script (bench_warm.sh): no
firebreak in it, written for torchrun like tests/python/ddp_plain.py (gloo,
a small MLP, AdamW, its own torch.save checkpoint every 4 steps, resumed
with torch.load).  The bench decides when the fault happens: once the file
FAULT exists, rank 1 of the first attempt writes the time and SIGKILLs
itself.  After a restart every rank appends the time its first step ended
to STAMPS and stops 3 steps later.
"""
import faulthandler
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ckpt, fault, stamps = sys.argv[1:4]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    g = torch.Generator().manual_seed(1234 + rank)
    step = start
    while True:
        x = torch.randn(32, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if attempt > 0 and step == start + 1:
            with open(stamps, "a") as f:
                f.write("%d %.6f\n" % (rank, time.time()))
        if attempt > 0 and step >= start + 4:
            break
        if attempt == 0 and rank == 1 and os.path.exists(fault):
            with open(fault + ".at", "w") as f:
                f.write("%.6f\n" % time.time())
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(loss.detach())
        if rank == 0 and step % 4 == 0:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        time.sleep(0.1)
    # Every rank leaves the loop before any tears gloo down: a rank that
    # closed its pairs while its peer still used them made the peer abort
    # (SIGABRT in torch 2.15's gloo, once in a whole bench run).
    dist.barrier()
    dist.destroy_process_group()
    # The barrier did not stop it: torch 2.15's gloo still aborted a rank
    # at interpreter teardown ("terminate called without an active
    # exception") once in a whole bench run (torchrun's run 3, 2026-12-04).
    # Nothing is left to do: leave without the teardown, as the Python
    # tests' ranks do (tests/python/replicated.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    faulthandler.enable()  # an abort before the end shows where, in stderr
    main()
