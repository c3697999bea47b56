"""Every shard firebreak.Checkpointer writes opens with the PyPI
`safetensors` package (safe_open), and holds each tensor of the state
under its name, with its dtype, shape and bytes: a model and AdamW after a
step, and tensors of every dtype the format has.  The pickled meta is a
U8 tensor like any other.
Run: PYTHONPATH=<build>/python PYTHON safetensors_read.py
"""
import os
import shutil
import tempfile

from fbtest import check, finish, require

require("torch", "firebreak", "safetensors")
import firebreak
import torch
from safetensors import safe_open


def bits(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, 6)).sum().backward()
    opt.step()
    g = torch.Generator().manual_seed(1)
    dtypes = {
        "bool": torch.rand(13, generator=g) > 0.5,
        "u8": torch.randint(0, 255, (5, 3), generator=g).to(torch.uint8),
        "i8": torch.randint(-128, 127, (7,), generator=g).to(torch.int8),
        "i16": torch.randint(-3000, 3000, (4, 2), generator=g).to(torch.int16),
        "i32": torch.randint(-10**6, 10**6, (6,), generator=g).to(torch.int32),
        "i64": torch.randint(-10**9, 10**9, (3, 3), generator=g),
        "f16": torch.randn(8, generator=g).to(torch.float16),
        "bf16": torch.randn(2, 5, generator=g).to(torch.bfloat16),
        "f32": torch.randn(3, 4, 2, generator=g),
        "f64": torch.randn(5, generator=g).to(torch.float64),
        "c64": torch.randn(4, generator=g, dtype=torch.complex64),
        "scalar": torch.tensor(2.25),
    }
    state = {"model": model, "optim": opt}
    state.update(dtypes)
    want = {"model/" + k: v for k, v in model.state_dict().items()}
    for pid, s in opt.state_dict()["state"].items():
        for k, v in s.items():
            if isinstance(v, torch.Tensor):
                want["optim/state/%d/%s" % (pid, k)] = v
    want.update(dtypes)

    tmp = tempfile.mkdtemp(prefix="fb-st.")
    try:
        ck = firebreak.Checkpointer(state, dir=tmp)
        ck.save(1)
        ck.wait()
        ck.close()
        shards = [os.path.join(d, f) for d, _, fs in os.walk(tmp) for f in fs
                  if f.endswith(".safetensors")]
        check(len(shards) == 1, "expected 1 shard, found %s" % shards)
        for path in shards:
            with safe_open(path, "pt") as f:
                names = set(f.keys())
                meta = f.metadata()
                if check("__firebreak__/meta" in names, "%s: no __firebreak__/meta" % path):
                    check(f.get_tensor("__firebreak__/meta").dtype == torch.uint8,
                          "%s: __firebreak__/meta is not U8" % path)
                missing = set(want) - names
                check(not missing, "%s lacks %s" % (path, sorted(missing)))
                for name in sorted(set(want) & names):
                    t = f.get_tensor(name)
                    w = want[name]
                    check(t.dtype == w.dtype and t.shape == w.shape
                          and torch.equal(bits(t), bits(w)),
                          "%s: %s read as %s %s, saved %s %s (or other bytes)"
                          % (path, name, t.dtype, tuple(t.shape), w.dtype, tuple(w.shape)))
                    check("firebreak.hash." + name in meta,
                          "%s: no firebreak.hash.%s" % (path, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish("ok: safetensors reads every tensor of a Checkpointer shard (%d tensors)"
           % len(want))


if __name__ == "__main__":
    main()
