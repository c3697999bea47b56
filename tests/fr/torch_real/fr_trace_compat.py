#!/usr/bin/env python3
"""Copy gloo flight-recorder pickles, corrected for PyTorch's analyzer.

    python fr_trace_compat.py SRC_DIR DST_DIR [--gloo-as-nccl]

PyTorch's analyzer (torch.distributed.flight_recorder.fr_trace) stops on
things that real ProcessGroupGloo dumps carry:

- pg_config files the group under an empty name ('') while the entries name
  it by id ('0'): KeyError ('0', 0) in build_collectives (torch 2.10 to
  2.15).
- profiling_name is 'gloo:<op>', and torch 2.10's analyzer asserts 'nccl'
  or 'xccl' (torch 2.15's does not).

The copy has the one unnamed pg_config group renamed after the group its
entries name and, with --gloo-as-nccl, 'gloo:' in profiling_name read as
'nccl:'. Nothing else changes. Only for comparing verdicts: firebreak reads
the dumps as they are.
"""
import os
import pickle
import sys


def fix(d, gloo_as_nccl):
    pgc = d.get("pg_config", {})
    named = {e["process_group"][0]: e["process_group"][1] for e in d["entries"]}
    if "" in pgc and len(pgc) == 1 and len(named) <= 1:
        name, desc = next(iter(named.items()), ("0", "default_pg"))
        pgc[name] = dict(pgc.pop(""), name=name, desc=desc)
    for e in d["entries"] if gloo_as_nccl else []:
        if e["profiling_name"].startswith("gloo:"):
            e["profiling_name"] = "nccl:" + e["profiling_name"][5:]
    return d


def main():
    src, dst = sys.argv[1:3]
    gloo_as_nccl = sys.argv[3:] == ["--gloo-as-nccl"]
    os.makedirs(dst, exist_ok=True)
    for f in sorted(os.listdir(src)):
        with open(os.path.join(src, f), "rb") as fp:
            d = pickle.load(fp)
        with open(os.path.join(dst, f), "wb") as fp:
            pickle.dump(fix(d, gloo_as_nccl), fp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
