"""ddp_hang.py -- the hang bench's DDP script (bench_hang.sh): no
firebreak in it, written for torchrun (gloo, a small MLP, AdamW, a
dist.all_reduce of the loss each step).  At --fault-step rank 1 writes the
time to the file FAULT and sleeps where the others call the all_reduce.
--timeout-s: the collective timeout given to init_process_group (0:
torch's default, 30 min for gloo).
"""
import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fault")
    ap.add_argument("--timeout-s", type=float, default=0)
    ap.add_argument("--fault-step", type=int, default=8)
    a = ap.parse_args()
    kw = {"timeout": datetime.timedelta(seconds=a.timeout_s)} if a.timeout_s else {}
    dist.init_process_group("gloo", **kw)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1234 + rank)
    step = 0
    while True:
        x = torch.randn(32, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == a.fault_step and rank == 1:
            with open(a.fault, "w") as f:
                f.write("%.6f\n" % time.time())
            time.sleep(3600)
        dist.all_reduce(loss.detach())
        time.sleep(0.05)


if __name__ == "__main__":
    main()
