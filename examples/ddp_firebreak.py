#!/usr/bin/python3
"""ddp_firebreak.py -- a PyTorch DDP script that uses the firebreak package:
heartbeats every step, a firebreak.Checkpointer for model, optimizer,
scheduler, RNG states and the data position, restored on start.

Run it under the supervisor (docs/pytorch.md):

    PYTHONPATH=build/python build/firebreak run --nproc-per-node 2 \\
        -- /usr/bin/python3 examples/ddp_firebreak.py --steps 60

A run killed and restarted any number of times prints the same final_hash
as one never interrupted: the batches come from torch's global RNG and a
data position, both checkpointed.  gloo on CPU; Debian's python3-torch.
"""
import argparse
import datetime
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import firebreak

CONTEXT = 8


class CharMLP(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16)
        self.fc1 = nn.Linear(CONTEXT * 16, hidden)
        self.fc2 = nn.Linear(hidden, vocab)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(self.emb(x).flatten(1))))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--ckpt-dir", default=None,
                   help="default: the supervisor's, else ./checkpoints")
    args = p.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    with open(args.data, "rb") as f:
        raw = f.read()
    vocab = sorted(set(raw))
    lut = {b: i for i, b in enumerate(vocab)}
    text = torch.tensor([lut[b] for b in raw], dtype=torch.long)

    torch.manual_seed(1)                 # same initial weights on every rank
    model = CharMLP(len(vocab), 64)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 15, gamma=0.5)
    torch.manual_seed(100 + rank)        # each rank its own batches

    ck = firebreak.Checkpointer({"model": model, "optim": opt, "sched": sched},
                                extra={"data_pos": 0}, dir=args.ckpt_dir)
    start = ck.restore() or 0
    if rank == 0:
        print("start at step %d (restart %d)" % (start, firebreak.restart_count()),
              flush=True)
    pos = ck.extra["data_pos"]
    offs = torch.arange(CONTEXT)
    for step in range(start, args.steps):
        starts = torch.randint(0, len(text) - CONTEXT, (args.batch,))
        pos += args.batch
        loss = F.cross_entropy(ddp(text[starts[:, None] + offs]),
                               text[starts + CONTEXT])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        firebreak.step(step + 1)
        if (step + 1) % args.ckpt_every == 0:
            ck.extra["data_pos"] = pos
            ck.save(step + 1)
    ck.wait()
    ck.close()
    if rank == 0:
        h = hashlib.sha256()
        for t in model.state_dict().values():
            h.update(t.numpy().tobytes())
        print("final_hash=%s data_pos=%d" % (h.hexdigest()[:16], pos), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
