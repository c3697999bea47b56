"""ddp_plain.py -- a DDP script written for torchrun, with no firebreak in
it: gloo on CPU, a small MLP, AdamW, its own torch.save checkpoint every
--ckpt-every steps (resumed with torch.load), and a dist.all_reduce of the
loss each step.  The fault modes are what tests/python/pyhooks.sh puts
the supervisor's Python hooks through:

  --fault crash      rank 1 is SIGKILLed at --fault-step (first attempt only)
  --fault sleep      rank 1 sleeps before the loss all_reduce at --fault-step
  --fault barrier    rank 1 calls dist.barrier where the others all_reduce
  --fault all        every rank sleeps at --fault-step (nobody to blame)
"""
import argparse
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--ckpt", default="ckpt.pt")
    ap.add_argument("--ckpt-every", type=int, default=5)
    ap.add_argument("--sleep-ms", type=int, default=20)
    ap.add_argument("--fault", default="none")
    ap.add_argument("--fault-step", type=int, default=12)
    a = ap.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    start = 0
    if os.path.exists(a.ckpt):
        state = torch.load(a.ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    print("rank %d attempt %d start at step %d pid=%d file=%s argv0=%s " % (
        rank, attempt, start, os.getpid(), __file__, sys.argv[0]),
          flush=True)
    g = torch.Generator().manual_seed(1234 + rank)
    for step in range(start, a.steps):
        x = torch.randn(32, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step + 1 == a.fault_step and (attempt == 0 or a.fault != "crash"):
            if a.fault == "crash" and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            if (a.fault == "sleep" and rank == 1) or a.fault == "all":
                time.sleep(600)
            if a.fault == "barrier" and rank == 1:
                dist.barrier()
        dist.all_reduce(loss.detach())  # the loss, for the log
        if rank == 0 and (step + 1) % a.ckpt_every == 0:
            tmp = a.ckpt + ".tmp"
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "step": step + 1}, tmp)
            os.replace(tmp, a.ckpt)
        time.sleep(a.sleep_ms / 1000)
    print("rank %d done at step %d" % (rank, a.steps), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
