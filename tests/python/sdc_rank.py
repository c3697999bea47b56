"""One rank of the SDC test (tests/python/sdc_supervised.sh): every rank
holds the same two CPU tensors, "updates" them identically each step, and
calls firebreak.sdc_check; no collective is needed for replicas to agree.
Run under `firebreak run --nproc-per-node 3`."""
import sys
import time

import torch

import firebreak

steps = int(sys.argv[1])
torch.manual_seed(0)
state = {"layer.weight": torch.randn(256, 64), "layer.bias": torch.zeros(64)}
firebreak.sdc_register(state, slice_bytes=16384)
for step in range(1, steps + 1):
    with torch.no_grad():
        for t in state.values():
            t.mul_(0.999).add_(0.001)
    firebreak.step(step)
    firebreak.sdc_check(step)
    time.sleep(0.02)
print("done", flush=True)
