"""dcp_plain.py -- one rank, no firebreak in it: four optimizer steps, a
torch.distributed.checkpoint save (dcp.save, or save_state_dict where
there is no save), then exit 3 on the first attempt; the next attempt loads it
(tests/python/pyhooks.sh, case dcp)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

d = sys.argv[1]
dist.init_process_group("gloo")
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
state = {"model": model.state_dict()}
if attempt:
    if hasattr(dcp, "load"):
        dcp.load(state, checkpoint_id=d)
    else:
        dcp.load_state_dict(state, storage_reader=dcp.FileSystemReader(d))
for _ in range(4):
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
if not attempt:
    if hasattr(dcp, "save"):
        dcp.save({"model": model.state_dict()}, checkpoint_id=d)
    else:
        dcp.save_state_dict({"model": model.state_dict()},
                            storage_writer=dcp.FileSystemWriter(d))
    sys.exit(3)
print("dcp_plain done", flush=True)
dist.destroy_process_group()
