"""A run killed at random steps and restored each time ends bit-identical
to one never interrupted: an MLP with AdamW and a LR scheduler, data drawn
from torch's, numpy's and Python's RNGs (all three must be restored), a
checkpoint every K steps.
Run: PYTHONPATH=<build>/python /usr/bin/python3 kill_restore.py"""
import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile

STEPS, EVERY = 60, 7


def train(ckdir, kill_at):
    import numpy
    import torch
    import firebreak
    torch.set_num_threads(1)
    torch.manual_seed(1)
    numpy.random.seed(2)
    random.seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(),
                            torch.nn.Dropout(0.1), torch.nn.Linear(64, 4))
    o = torch.optim.AdamW(m.parameters(), lr=3e-3)
    s = torch.optim.lr_scheduler.StepLR(o, 10, gamma=0.7)
    ck = firebreak.Checkpointer({"model": m, "optim": o, "sched": s},
                                extra={"data_pos": 0}, dir=ckdir)
    start = ck.restore() or 0
    pos = ck.extra["data_pos"]
    for step in range(start, STEPS):
        x = torch.randn(8, 16) + float(numpy.random.rand()) + random.random()
        pos += 8
        loss = (m(x) - x[:, :4]).pow(2).mean()
        loss.backward()
        o.step()
        s.step()
        o.zero_grad()
        firebreak.step(step + 1)
        if (step + 1) % EVERY == 0:
            ck.extra["data_pos"] = pos
            ck.save(step + 1)
        if step + 1 == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)   # mid-save, perhaps
    ck.wait()
    ck.close()
    h = hashlib.sha256()
    for t in m.state_dict().values():
        h.update(t.numpy().tobytes())
    print("final_hash=%s pos=%d" % (h.hexdigest(), pos))


def run(ckdir, kill_at):
    p = subprocess.run([sys.executable, __file__, "child", ckdir, str(kill_at)],
                       stdout=subprocess.PIPE, text=True)
    return p.returncode, p.stdout.strip()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        train(sys.argv[2], int(sys.argv[3]))
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: this python has no torch")
        return 77
    rnd = random.Random(int(os.environ.get("FB_TEST_SEED", "0")) or None)
    with tempfile.TemporaryDirectory(prefix="fbpy-kill-") as d:
        rc, want = run(os.path.join(d, "ref"), -1)
        if rc != 0 or "final_hash=" not in want:
            print("FAIL: reference run: rc %d %s" % (rc, want))
            return 1
        ckdir = os.path.join(d, "killed")
        kills = sorted(rnd.sample(range(2, STEPS), 4))
        for k in kills:
            rc, out = run(ckdir, k)
            if rc != -signal.SIGKILL:
                print("FAIL: run to be killed at step %d: rc %d" % (k, rc))
                return 1
        rc, got = run(ckdir, -1)
        print("kills at %s; uninterrupted %s; restored %s" % (kills, want, got))
        if rc != 0 or got != want:
            print("FAIL: the restored run differs")
            return 1
    print("ok: killed at %s, restored each time, bit-identical" % kills)
    return 0


if __name__ == "__main__":
    sys.exit(main())
