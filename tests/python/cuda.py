"""CUDA tensors through the C engine's device-to-host path: a model and
its AdamW state on the GPU saved (the snapshot is the device-to-host copy
into pinned staging), changed, and restored bit-identical; CPU tensors
beside them keep the write-protect snapshot.  Skips (77), saying why,
where torch has no GPU or the extension was built without the CUDA path.
Run: PYTHONPATH=<build>/python PYTHON cuda.py"""
import os
import shutil
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP: this python has no torch")
    sys.exit(77)

import firebreak
from firebreak import _firebreak


def main():
    if not _firebreak.DEVICE_SUPPORT:
        print("SKIP: this firebreak extension was built without the CUDA path "
              "(no CUDA toolkit headers at build time)")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: torch %s sees no CUDA device" % torch.__version__)
        return 77
    d = tempfile.mkdtemp(prefix="fbpy-cuda-")
    try:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(),
                                torch.nn.Linear(256, 8)).cuda()
        o = torch.optim.AdamW(m.parameters(), lr=1e-2)
        host = torch.arange(10000, dtype=torch.float32)   # a CPU tensor beside
        for _ in range(3):
            m(torch.randn(4, 64, device="cuda")).sum().backward()
            o.step()
            o.zero_grad()
        ck = firebreak.Checkpointer({"model": m, "optim": o, "host": host}, dir=d)
        ck.save(3)
        want = [t.detach().cpu().clone() for t in m.state_dict().values()]
        want_opt = [v.cpu().clone() for st in o.state_dict()["state"].values()
                    for v in st.values() if torch.is_tensor(v)]
        with torch.no_grad():     # written right after save: the snapshot holds
            for p in m.parameters():
                p.add_(1.0)
            host.add_(1.0)
        ck.wait()
        ck.close()
        ck2 = firebreak.Checkpointer({"model": m, "optim": o, "host": host}, dir=d)
        step = ck2.restore()
        ck2.close()
        got = [t.detach().cpu() for t in m.state_dict().values()]
        got_opt = [v.cpu() for st in o.state_dict()["state"].values()
                   for v in st.values() if torch.is_tensor(v)]
        ok = (step == 3 and all(torch.equal(a, b) for a, b in zip(want, got))
              and all(torch.equal(a, b) for a, b in zip(want_opt, got_opt))
              and torch.equal(host, torch.arange(10000, dtype=torch.float32))
              and next(m.parameters()).is_cuda)
        print("%s: CUDA model and AdamW state saved at step 3 and restored%s"
              % ("ok" if ok else "FAIL", "" if ok else " differently"))
        return 0 if ok else 1
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
