#!/usr/bin/env python3
"""Write PyTorch flight-recorder dumps (the c10d FlightRecorder schema,
versions 2.2..2.10) for the analyzer's scenarios, as JSON and as pickles of
protocols 2..5, one file per rank named nccl_trace_rank_<R> like PyTorch.

    python3 gen_torch.py OUTDIR
    python3 gen_torch.py OUTDIR --many RANKS ENTRIES FMT  (the bench)
    python3 gen_torch.py OUTDIR --wide RANKS    (one dump, one huge group)
    python3 gen_torch.py OUTDIR --groups N      (one dump, N groups)
    python3 gen_torch.py OUTDIR --hostile       (escape sequences in strings)

The files under tests/fr/data/torch/ were made by this script; rerun it
to regenerate them.  No torch needed: one scenario imitates the typed
lists PyTorch's C++ pickler writes (torch.jit._pickle.build_intlist) with
a stand-in module, so the reader's handling of them is tested too.
"""
import json
import os
import pickle
import sys
import types

T0 = 1_700_000_000_000_000_000  # ns, a fixed wall time


# A stand-in for torch.jit._pickle so pickle writes GLOBAL + REDUCE the
# way PyTorch's C++ pickler does for typed int lists.
def _install_fake_jit():
    names = ["torch", "torch.jit", "torch.jit._pickle"]
    for n in names:
        sys.modules.setdefault(n, types.ModuleType(n))

    def build_intlist(x):
        return x
    build_intlist.__module__ = "torch.jit._pickle"
    build_intlist.__qualname__ = "build_intlist"
    sys.modules["torch.jit._pickle"].build_intlist = build_intlist
    return build_intlist


class IntList(list):
    def __reduce__(self):
        return (_install_fake_jit(), (list(self),))


def entry(rid, pg, seq, name, state, t_ms, size=1024, dtype="Float",
          out=None, p2p=False, p2p_seq=0, version="2.10", frames=None,
          typed=False):
    ins = [[size]]
    outs = [[out if out is not None else size]]
    if typed:
        ins = [IntList(x) for x in ins]
        outs = [IntList(x) for x in outs]
    e = {
        "record_id": rid,
        "pg_id": int(pg),
        "process_group": [pg, "default_pg" if pg == "0" else "tp"],
        "collective_seq_id": 0 if p2p else seq,
        "p2p_seq_id": seq if p2p else 0,
        "op_id": rid,
        "profiling_name": name,
        "time_created_ns": T0 + int(t_ms * 1e6),
        "input_sizes": ins,
        "input_dtypes": [dtype],
        "output_sizes": outs,
        "output_dtypes": [dtype],
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": (T0 + int(t_ms * 1e6) + 1000)
        if state == "completed" else None,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": p2p,
        "duration_ms": 0.5 if state == "completed" else None,
        "thread_name": "pt_main_thread",
        "thread_id": 1,
    }
    if frames is not None:
        e["frames"] = frames
    if version < "2.4" and version != "2.10":
        # older dumps lack some keys
        for k in ("is_p2p", "thread_name", "thread_id", "duration_ms"):
            e.pop(k, None)
    return e


def dump(rank, entries, pgs, version="2.10"):
    d = {
        "version": version,
        "pg_config": {k: {"name": k, "desc": v[0], "ranks": str(v[1])}
                      for k, v in pgs.items()},
        "pg_status": {k: {"last_enqueued_collective": 0,
                          "last_started_collective": 0,
                          "last_completed_collective": 0} for k in pgs},
        "entries": entries,
    }
    if version >= "2.4" or version == "2.10":
        d["comm_lib_version"] = "2.21.5"
    else:
        d["nccl_version"] = "2.18.1"
    return d


WORLD = {"0": ("default_pg", [0, 1, 2, 3])}
WITH_TP = {"0": ("default_pg", [0, 1, 2, 3]), "1": ("tp", [2, 3])}
FRAMES = [{"name": "train_step", "filename": "train.py", "line": 42},
          {"name": "main", "filename": "train.py", "line": 99}]


def allreduces(n, first_rid=0, pending_last=False, t_step=10.0, late=0.0,
               typed=False, frames=None, **kw):
    out = []
    for i in range(n):
        st = "scheduled" if pending_last and i == n - 1 else "completed"
        out.append(entry(first_rid + i, "0", i + 1, "nccl:all_reduce", st,
                         i * t_step + late, typed=typed, frames=frames, **kw))
    return out


def scenario(name):
    """rank -> dump dict"""
    d = {}
    for r in range(4):
        if name == "hang":
            ents = allreduces(6 if r != 2 else 5, pending_last=r != 2,
                              frames=FRAMES)
        elif name == "hang_typed":
            ents = allreduces(6 if r != 2 else 5, pending_last=r != 2,
                              typed=True, frames=FRAMES)
        elif name == "type":
            ents = allreduces(5)
            nm = "nccl:broadcast" if r == 1 else "nccl:all_reduce"
            ents.append(entry(5, "0", 6, nm, "scheduled", 60))
        elif name == "size":
            ents = allreduces(5)
            ents.append(entry(5, "0", 6, "nccl:all_reduce", "completed", 60,
                              size=512 if r == 3 else 1024))
        elif name == "dtype":
            ents = allreduces(5)
            ents.append(entry(5, "0", 6, "nccl:all_reduce", "completed", 60,
                              dtype="Half" if r == 0 else "Float"))
        elif name == "allgather":
            out = 4 * 256 if r != 2 else 3 * 256
            ents = [entry(0, "0", 1, "nccl:all_gather", "completed", 0,
                          size=256, out=out)]
        elif name == "p2p":
            ents = allreduces(3)
            if r == 0:
                ents.append(entry(3, "0", 1, "nccl:send 0->1", "scheduled", 40,
                                  p2p=True, p2p_seq=1))
        elif name == "subgroup":
            ents = allreduces(7)
            if r >= 2:
                ents += [entry(7, "1", 1, "nccl:all_reduce", "completed", 80,
                               dtype="BFloat16"),
                         entry(8, "1", 2, "nccl:all_reduce", "completed", 90,
                               dtype="BFloat16")]
                if r == 3:
                    ents.append(entry(9, "1", 3, "nccl:all_reduce", "scheduled",
                                      100, dtype="BFloat16"))
            else:
                ents.append(entry(7, "0", 8, "nccl:all_reduce", "scheduled", 80))
        elif name == "straggler":
            ents = allreduces(20, late=7.0 if r == 1 else r * 0.001)
        elif name == "wrapped":
            base = 5000
            ents = [entry(base + i, "0", base + i + 1, "nccl:all_reduce",
                          "completed", i) for i in range(50)]
            if r != 0:
                ents.append(entry(base + 50, "0", base + 51, "nccl:all_reduce",
                                  "scheduled", 50))
        elif name == "versions":
            v = "2.2" if r % 2 else "2.10"
            ents = allreduces(6 if r != 3 else 5, pending_last=r != 3,
                              version=v)
            d[r] = dump(r, ents, WORLD, version=v)
            continue
        elif name == "ok":
            ents = allreduces(10)
        else:
            raise SystemExit("unknown scenario " + name)
        d[r] = dump(r, ents, WITH_TP if name == "subgroup" else WORLD)
    return d


def plain(o):
    """JSON has no typed lists and no frames (PyTorch's JSON dump)."""
    if isinstance(o, dict):
        return {k: plain(v) for k, v in o.items() if k != "frames"}
    if isinstance(o, list):
        return [plain(x) for x in o]
    return o


# scenario -> formats written
PLAN = {
    "hang": ["json", "p2", "p3", "p4", "p5"],
    "hang_typed": ["p2"],
    "type": ["json", "p4"],
    "size": ["json", "p2"],
    "dtype": ["p3"],
    "allgather": ["json"],
    "p2p": ["p5"],
    "subgroup": ["json", "p4"],
    "straggler": ["json"],
    "wrapped": ["p2"],
    "versions": ["json"],
    "ok": ["json", "p2"],
}


def many(out, ranks, n, fmt):
    """ranks x n all_reduces; rank ranks//3 never enters the last one.

    Dumps hold no rank (the file name does), so the two kinds of dump are
    encoded once and written ranks times.  json.dumps is the C encoder;
    json.dump to a file is the pure-Python one, ~10x slower (same bytes).
    """
    os.makedirs(out, exist_ok=True)
    world = {"0": ("default_pg", list(range(ranks)))}
    blobs = {}
    for m in (n, n - 1):
        ents = [entry(i, "0", i + 1, "nccl:all_reduce",
                      "completed" if i < n - 1 else "scheduled", i * 10.0)
                for i in range(m)]
        d = dump(0, ents, world)
        blobs[m] = (json.dumps(d).encode() if fmt == "json"
                    else pickle.dumps(d, protocol=int(fmt[1])))
    for r in range(ranks):
        path = os.path.join(out, f"nccl_trace_rank_{r}")
        with open(path, "wb") as f:
            f.write(blobs[n - 1 if r == ranks // 3 else n])


def write_json(out, rank, d):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"nccl_trace_rank_{rank}"), "w") as f:
        json.dump(d, f)


def wide(out, ranks):
    """One dump, rank 0's, whose one group lists `ranks` ranks; rank 0
    waits in all_reduce #5 and no other rank's dump is there."""
    ents = allreduces(5, pending_last=True)
    d = dump(0, ents, {})
    d["pg_config"] = {"0": {"name": "0", "desc": "default_pg",
                            "ranks": str(list(range(ranks)))}}
    write_json(out, 0, d)


def groups(out, n):
    """One dump, rank 0's, in n groups {0, g + 1} with two completed
    all_reduces each: nothing wrong in what it shows, ranks 1..n missing."""
    pgs = {str(g): (f"pair{g}", [0, g + 1]) for g in range(n)}
    ents = []
    for g in range(n):
        for s in (1, 2):
            e = entry(len(ents), str(g), s, "nccl:all_reduce", "completed",
                      len(ents) * 0.01)
            e["pg_id"] = g
            e["process_group"] = [str(g), f"pair{g}"]
            ents.append(e)
    write_json(out, 0, dump(0, ents, pgs))


def hostile(out):
    """The hang scenario with terminal escape sequences in every string a
    dump carries that the analyzer prints: group key and description,
    dtype, stack frame file and function."""
    esc = "\x1b[2J\x1b]0;owned\x07"
    frames = [{"name": "step" + esc, "filename": "train" + esc + ".py",
               "line": 7}]
    for r in range(4):
        ents = allreduces(6 if r != 2 else 5, pending_last=r != 2,
                          frames=frames, dtype="Float" + esc)
        for e in ents:
            e["process_group"] = ["0", "tp" + esc]
        d = dump(r, ents, {"0": ("tp" + esc, [0, 1, 2, 3])})
        d["version"] = "2.10" + esc if r == 3 else "2.10"
        write_json(out, r, d)


def main():
    out = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "--many":
        many(out, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    if len(sys.argv) > 2 and sys.argv[2] == "--wide":
        wide(out, int(sys.argv[3]))
        return
    if len(sys.argv) > 2 and sys.argv[2] == "--groups":
        groups(out, int(sys.argv[3]))
        return
    if len(sys.argv) > 2 and sys.argv[2] == "--hostile":
        hostile(out)
        return
    _install_fake_jit()
    for name, fmts in PLAN.items():
        dumps = scenario(name)
        for fmt in fmts:
            d = os.path.join(out, f"{name}-{fmt}")
            os.makedirs(d, exist_ok=True)
            for r, dd in dumps.items():
                path = os.path.join(d, f"nccl_trace_rank_{r}")
                if fmt == "json":
                    with open(path, "w") as f:
                        json.dump(plain(dd), f)
                else:
                    with open(path, "wb") as f:
                        pickle.dump(dd, f, protocol=int(fmt[1]))


if __name__ == "__main__":
    main()
