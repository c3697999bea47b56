#!/usr/bin/python3
"""ddp_train.py -- a plain PyTorch DDP training script, as a user writes it.

It knows nothing about firebreak: it uses torchrun's environment contract
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), the gloo backend
on CPU, and saves and restores its own checkpoint with torch.save, so a
restarted job resumes where the last checkpoint left it.  `firebreak run
--launcher local --nproc-per-node 2 -- /usr/bin/python3 ddp_train.py` is the
proof that the supervisor serves jobs it cannot see inside.

The model is a small character-level MLP language model over a text file
(the same idea as fb-train-mlp): the previous 8 bytes, embedded, one tanh
hidden layer, a softmax over the bytes.  Each rank's batch at step N is
drawn from a generator seeded with (seed, rank, N), so the data stream
needs no state of its own beyond the step.

Checkpoint directory: --ckpt-dir, else $FIREBREAK_RUN_DIR/ddp-ckpt when
that is set, else ./ddp-ckpt.  Rank 0 writes ckpt.pt atomically (temporary
name, fsync, rename) every --ckpt-every steps.

Needs Debian's python3-torch (/usr/bin/python3 here).
"""

import argparse
import datetime
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

CONTEXT = 8
EMBED = 16


class CharMLP(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.emb = nn.Embedding(vocab, EMBED)
        self.fc1 = nn.Linear(CONTEXT * EMBED, hidden)
        self.fc2 = nn.Linear(hidden, vocab)

    def forward(self, x):
        h = torch.tanh(self.fc1(self.emb(x).flatten(1)))
        return self.fc2(h)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/common-licenses/GPL-3",
                   help="text file to learn")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ckpt-every", type=int, default=20)
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("--sleep-ms", type=int, default=0,
                   help="extra sleep per step, to make runs longer")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--timeout-s", type=int, default=120,
                   help="collective timeout")
    return p.parse_args()


def ckpt_dir_of(args):
    if args.ckpt_dir:
        return args.ckpt_dir
    run_dir = os.environ.get("FIREBREAK_RUN_DIR")
    if run_dir:
        return os.path.join(run_dir, "ddp-ckpt")
    return "ddp-ckpt"


def save_atomic(obj, path):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def params_hash(model):
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    args = parse_args()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=args.timeout_s))

    with open(args.data, "rb") as f:
        raw = f.read()
    vocab_bytes = sorted(set(raw))
    lut = {b: i for i, b in enumerate(vocab_bytes)}
    text = torch.tensor([lut[b] for b in raw], dtype=torch.long)
    windows = len(text) - CONTEXT

    torch.manual_seed(args.seed)
    model = CharMLP(len(vocab_bytes), args.hidden)
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)

    cdir = ckpt_dir_of(args)
    path = os.path.join(cdir, "ckpt.pt")
    start = 0
    if os.path.exists(path):
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"]
        if rank == 0:
            print("resuming from step %d (%s)" % (start, path), flush=True)
    elif rank == 0:
        print("starting fresh (no checkpoint at %s)" % path, flush=True)
    if rank == 0:
        os.makedirs(cdir, exist_ok=True)

    offs = torch.arange(CONTEXT)
    t0 = time.monotonic()
    loss = torch.tensor(0.0)
    for step in range(start + 1, args.steps + 1):
        g = torch.Generator().manual_seed(
            args.seed * 1000003 + rank * 7919 + step)
        starts = torch.randint(0, windows, (args.batch,), generator=g)
        x = text[starts[:, None] + offs]
        y = text[starts + CONTEXT]
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000.0)
        if rank == 0 and (step % args.log_every == 0 or step == start + 1):
            print("step %d/%d loss %.4f %.1f steps/s" % (
                step, args.steps, loss.item(),
                (step - start) / (time.monotonic() - t0)), flush=True)
        if args.ckpt_every and step % args.ckpt_every == 0:
            if rank == 0:
                save_atomic({"model": model.state_dict(),
                             "optim": opt.state_dict(), "step": step}, path)
            dist.barrier()

    if rank == 0:
        print("done: %d steps, final loss %.4f" % (args.steps, loss.item()))
        print("final_hash=%s" % params_hash(model), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
