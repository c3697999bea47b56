#!/usr/bin/python3
"""train.py -- a small GPT-style character model, DDP over gloo on CPU,
checkpointed and supervised with the firebreak package.

Launch it like any torchrun script (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT from the environment; one process without them):

    /usr/bin/python3 -m torch.distributed.run --nproc-per-node 2 examples/gpt/train.py
    PYTHONPATH=build/python build/firebreak run --nproc-per-node 2 \\
        -- /usr/bin/python3 examples/gpt/train.py

Deterministic: the same arguments and world size give the same final
weights, bit for bit, whether the run was killed and restored any number
of times or never interrupted.  It ends by printing final_hash=<sha256 of
the model and optimizer state>.  See examples/gpt/README.md.
"""
import argparse
import datetime
import hashlib
import math
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import firebreak

HERE = os.path.dirname(os.path.abspath(__file__))
CORPORA = ("/usr/share/common-licenses/GPL-3", os.path.join(HERE, "corpus.txt"))


# -- the model ---------------------------------------------------------------

class SelfAttention(nn.Module):
    """Multi-head causal self-attention, written out (torch 1.13 has no
    scaled_dot_product_attention)."""

    def __init__(self, d, heads, ctx, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)
        # A plain attribute, not a buffer: nothing to save, and gloo in
        # torch 1.13 cannot broadcast bool buffers (DDP would).
        self.mask = torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, d, heads, ctx, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads, ctx, dropout)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d),
                                 nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, d, heads, layers, dropout):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[Block(d, heads, ctx, dropout)
                                      for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t)))
        return self.head(self.ln(self.blocks(x)))


# -- data --------------------------------------------------------------------

class Windows:
    """Every window of ctx+1 bytes of a text, visited in a fixed scattered
    order: window i starts at (i * stride) % count.  The position in that
    order (a number of windows) is all a restart needs to continue."""

    def __init__(self, ids, ctx):
        self.ids, self.ctx = ids, ctx
        self.count = len(ids) - ctx - 1
        if self.count < 1:
            raise SystemExit("train.py: the text is shorter than the context")
        self.stride = 7919          # a prime: visits every window once per pass
        while math.gcd(self.stride, self.count) != 1:
            self.stride += 2

    def batch(self, first, n):
        starts = (torch.arange(first, first + n) * self.stride) % self.count
        offs = torch.arange(self.ctx + 1)
        w = self.ids[starts[:, None] + offs]
        return w[:, :-1], w[:, 1:]


def load_text(path):
    for p in ([path] if path else CORPORA):
        try:
            with open(p, "rb") as f:
                return p, f.read()
        except OSError as e:
            if path:
                raise SystemExit("train.py: %s" % e)
    raise SystemExit("train.py: no corpus (%s)" % ", ".join(CORPORA))


# -- helpers -----------------------------------------------------------------

def state_hash(model, opt):
    """sha256 over the model's and the optimizer's tensors, with names."""
    h = hashlib.sha256()
    for prefix, sd in (("model", model.state_dict()), ("optim", opt.state_dict()["state"])):
        for k, v in sd.items():
            for name, t in (v.items() if isinstance(v, dict) else [("", v)]):
                if isinstance(t, torch.Tensor):
                    h.update(("%s/%s/%s %s %s" % (prefix, k, name, t.dtype,
                                                  tuple(t.shape))).encode())
                    h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


FIXED_ONE = 2.0 ** 40      # fixed-point scale of the gradient sums


def exact_allreduce(world, bucket):
    """DDP communication hook: the mean of the ranks' gradients, summed in
    64-bit fixed point.  Integer sums do not depend on the order of the
    additions, so the result is the same whatever the bucket layout (DDP
    lays its buckets out again after the first step of every process,
    restored or not) and however gloo splits the sum among 3 or more ranks.
    A float sum would differ in the last bits after a restore."""
    g = bucket.buffer()
    q = torch.round(g.double() * FIXED_ONE).long()
    fut = dist.all_reduce(q, async_op=True).get_future()

    def mean(f):
        return (f.value()[0].double() / (FIXED_ONE * world)).to(g.dtype)
    return fut.then(mean)


def write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".final_hash.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def evaluate(model, val, args, rank, world):
    """Mean loss over a fixed set of validation windows, split among the
    ranks and summed with one all_reduce.  Touches no RNG."""
    model.eval()
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for i in range(rank, args.eval_batches, world):
            x, y = val.batch(i * args.batch, args.batch)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            total += torch.tensor([loss.item(), 1.0], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(total)
    model.train()
    return (total[0] / total[1]).item()


def parse_args():
    p = argparse.ArgumentParser(
        description="A small GPT-style character model, DDP on CPU, checkpointed "
                    "with firebreak (examples/gpt/README.md).")
    p.add_argument("--data", help="text file (default %s, else %s)" % CORPORA)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--ctx", type=int, default=32, help="context length in bytes")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ckpt-every", type=int, default=20, help="0: never")
    p.add_argument("--ckpt-dir", help="default: the supervisor's, else ./checkpoints")
    p.add_argument("--eval-every", type=int, default=50, help="0: never")
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--sleep-ms", type=float, default=0,
                   help="extra sleep per step, to make a run last")
    p.add_argument("--hash-out", help="write the final hash here (default "
                   "$FIREBREAK_RUN_DIR/final_hash under the supervisor)")
    a = p.parse_args()
    for k in ("steps", "batch", "ctx", "dim", "heads", "layers", "eval_batches"):
        if getattr(a, k) < 1:
            p.error("--%s: expected >= 1" % k.replace("_", "-"))
    if a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    return a


def main():
    args = parse_args()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))

    path, raw = load_text(args.data)
    vocab = sorted(set(raw))
    lut = torch.zeros(256, dtype=torch.long)
    lut[torch.tensor(vocab)] = torch.arange(len(vocab))
    ids = lut[torch.tensor(list(raw), dtype=torch.long)]
    split = len(ids) * 9 // 10
    train, val = Windows(ids[:split], args.ctx), Windows(ids[split:], args.ctx)

    torch.manual_seed(args.seed)              # the same initial weights everywhere
    model = GPT(len(vocab), args.ctx, args.dim, args.heads, args.layers, args.dropout)
    net = model
    if world > 1:
        net = DDP(model)
        net.register_comm_hook(world, exact_allreduce)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps,
                                                       eta_min=args.lr / 10)
    torch.manual_seed(args.seed * 1000 + 1 + rank)   # each rank its own dropout

    # Model, AdamW (its moments appear at the first step), scheduler, the
    # RNG states (the Checkpointer's own) and where the data stands.
    ck = firebreak.Checkpointer({"model": model, "optim": opt, "sched": sched},
                                extra={"data_pos": 0}, dir=args.ckpt_dir)
    start = ck.restore() or 0
    data_pos = ck.extra["data_pos"]           # windows taken so far, all ranks
    if rank == 0:
        print("gpt: %d ranks, %d parameters, vocab %d (%s), %s at step %d"
              " (restart %d)" % (world, sum(p.numel() for p in model.parameters()),
                                 len(vocab), path,
                                 "restored" if start else "starting", start,
                                 firebreak.restart_count()), flush=True)
    t0 = time.monotonic()
    losses = []
    for step in range(start, args.steps):
        x, y = train.batch(data_pos + rank * args.batch, args.batch)
        data_pos += world * args.batch
        loss = F.cross_entropy(net(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if args.sleep_ms > 0:
            time.sleep(args.sleep_ms / 1000)
        firebreak.step(step + 1)             # heartbeat; injected faults fire here
        n = step + 1
        losses.append(loss.item())
        if rank == 0 and (n % args.log_every == 0 or n == args.steps):
            print("step %d/%d loss %.4f (mean of %d) lr %.2e %.1f steps/s" % (
                n, args.steps, sum(losses) / len(losses), len(losses),
                sched.get_last_lr()[0], (n - start) / (time.monotonic() - t0)),
                flush=True)
            losses = []
        if args.eval_every and n % args.eval_every == 0:
            with firebreak.phase("eval"):
                v = evaluate(model, val, args, rank, world)
            if rank == 0:
                print("step %d eval loss %.4f" % (n, v), flush=True)
        if args.ckpt_every and n % args.ckpt_every == 0 and n < args.steps:
            ck.extra["data_pos"] = data_pos
            ck.save(n)
    ck.wait()
    ck.close()

    digest = state_hash(model, opt)
    status = 0
    if world > 1:                             # the replicas must agree
        hashes = [None] * world
        dist.all_gather_object(hashes, digest)
        if len(set(hashes)) != 1:
            if rank == 0:
                print("gpt: the ranks' weights differ: %s" % hashes, file=sys.stderr)
            status = 1
    if rank == 0 and not status:
        print("final_hash=%s data_pos=%d" % (digest, data_pos), flush=True)
        out = args.hash_out
        if not out and os.environ.get("FIREBREAK_RUN_DIR"):
            out = os.path.join(os.environ["FIREBREAK_RUN_DIR"], "final_hash")
        if out:
            write_atomic(out, digest + "\n")
    if world > 1:
        # Leave without destroying the process group or DDP: in torch 1.13
        # that can deadlock (the gloo worker thread frees a tensor and needs
        # the GIL, which the thread destroying the group holds while it
        # joins the worker).  Everything worth keeping is written.
        sys.stdout.flush()
        sys.stderr.flush()
        firebreak.finalize()
        os._exit(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
