"""Load a firebreak shard with the reference safetensors package and compare
every tensor's bytes with the expect-rR/<name>.bin files ckpt_sample wrote.
Usage: python3 reference_reader.py SHARD EXPECT_DIR"""
import os
import sys

import safetensors
from safetensors import safe_open

shard, expect = sys.argv[1], sys.argv[2]
raw = open(shard, "rb").read()
# The reference parser (Rust) validates the header and offsets; it returns
# every dtype's raw bytes, including those numpy has no type for.
tensors = dict(safetensors.deserialize(raw))
names = sorted(f[:-4] for f in os.listdir(expect) if f.endswith(".bin"))
assert sorted(tensors) == names, (sorted(tensors), names)
for name in names:
    want = open(os.path.join(expect, name + ".bin"), "rb").read()
    got = bytes(tensors[name]["data"])
    assert got == want, "tensor %s: bytes differ" % name
# numpy's view of the dtypes numpy has (shape and bytes again).
numpy_types = {"F64", "F32", "F16", "I64", "U64", "I32", "U32", "I16", "U16",
               "I8", "U8", "BOOL", "C64"}
n_np = 0
with safe_open(shard, framework="np") as f:
    meta = f.metadata()
    for name in f.keys():
        if tensors[name]["dtype"] not in numpy_types:
            continue
        arr = f.get_tensor(name)
        assert list(arr.shape) == list(tensors[name]["shape"]), name
        want = open(os.path.join(expect, name + ".bin"), "rb").read()
        assert arr.tobytes() == want, name
        n_np += 1
assert meta["firebreak.format"] == "1" and "firebreak.hash.scalar" in meta, meta
print("reference reader: %d tensors match (%d also via numpy)" % (len(names), n_np))
