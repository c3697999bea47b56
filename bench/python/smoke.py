"""smoke.py PYTHON DIR -- bench_ckpt_torch.py --quick on a tiny state with
PYTHON, its output checked for form (ctest python_bench_smoke*, label
torch): every method a row of both tables or named as skipped, every
figure a number, the cost never below the save call, the eight TARGET
lines, a phase line per method and step and the phases summary, the
JSON file complete, the 2-rank state written once (the bytes of both
ranks about one copy of their state), nothing left in DIR.  Not the
targets: timings are for benchmarks, and this runs under load."""
import json
import math
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = ["firebreak copy", "firebreak protect", "torch.save+fsync", "dcp.save",
           "dcp.async_save", "dcp.async_save+stager", "safetensors+fsync",
           "dcp.save+firebreak.dcp"]
SKIP_WORDS = {"firebreak protect": "firebreak protect",
              "dcp.save": "dcp.save", "dcp.async_save": "dcp.async_save",
              "dcp.async_save+stager": "DefaultStager",
              "safetensors+fsync": "safetensors",
              "dcp.save+firebreak.dcp": "firebreak.dcp"}
TARGETS = {"cost_rw", "cost_overwrite", "stall", "durable", "durable_p90", "durable_max",
           "restore", "restore_fio"}
NUM = r"-?\d+\.\d+"


def fail(msg, out=""):
    sys.stdout.write(out)
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    py, root = sys.argv[1], os.path.abspath(sys.argv[2])
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    data, js = os.path.join(root, "data"), os.path.join(root, "out.json")
    saves = 2
    r = subprocess.run([py, os.path.join(HERE, "bench_ckpt_torch.py"), data, "--quick",
                        "--size", "4", "--saves", str(saves), "--no-targets", "--json", js],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=900)
    out = r.stdout
    if r.returncode != 0:
        fail("bench exited %d" % r.returncode, out)
    lines = out.splitlines()
    skipped = [ln for ln in lines if ln.startswith("skipped: ")]
    # both tables: a header, then one row per method present
    for kind in ("rw", "overwrite"):
        try:
            at = lines.index(next(ln for ln in lines if ln.startswith("step %s:" % kind)))
        except StopIteration:
            fail("no table for the %s step" % kind, out)
        rows = {}
        for ln in lines[at + 2:]:
            if not ln.strip():
                break
            name = ln[:24].strip()
            cells = ln[24:].replace("|", " ").split()
            if len(cells) != 11 or not all(re.fullmatch(NUM, c) or c == "-"
                                          for c in cells[:1] + cells[-1:]) \
                    or not all(re.fullmatch(NUM, c) for c in cells[1:10]):
                fail("%s table: malformed row %r" % (kind, ln), out)
            rows[name] = cells
        for m in METHODS:
            if m not in rows and not any(SKIP_WORDS.get(m, "\0") in s for s in skipped):
                fail("%s table: method %s neither measured nor skipped" % (kind, m), out)
        if "firebreak copy" not in rows or "torch.save+fsync" not in rows:
            fail("%s table: firebreak copy or torch.save missing" % kind, out)
    got = {}
    for ln in lines:
        if ln.startswith("TARGET "):
            m = re.fullmatch(r"TARGET (\w+) (%s) (%s) (%s|inf) (%s) (PASS|MISS)"
                             % (NUM, NUM, NUM, NUM), ln)
            if not m:
                fail("malformed target line %r" % ln, out)
            got[m.group(1)] = m
    if set(got) != TARGETS:
        fail("target lines %s, expected %s" % (sorted(got), sorted(TARGETS)), out)
    for what in ("into a fresh state", "into this process's trained state"):
        if not re.search(r"^restore, cold.*%s.*firebreak %s s, torch.load %s s"
                         % (re.escape(what), NUM, NUM), out, re.M):
            fail("no restore line %s with firebreak and torch.load" % what, out)
    # fio's cold read takes turns with the restores (one try each per round)
    if not re.search(r"^fio read, cold, of %s MiB, best of \d+ \(turn about with the "
                     r"restores\): %s s" % (NUM, NUM), out, re.M):
        fail("no fio read line", out)
    # the durable target is a median against fio's best of 5 writes
    if not re.search(r"^fio write\+fsync of %s MiB: best of 5 %s s .*p50 %s s$" % (NUM, NUM, NUM),
                     out, re.M):
        fail("no fio write line with its best of 5 and p50", out)
    if not re.search(r"^durable: .* p50 %s s against fio write\+fsync best %s s$" % (NUM, NUM),
                     out, re.M):
        fail("no durable line against fio's best", out)
    # where the run's time goes: a phase line per method and step measured,
    # and the summary of every phase at the end
    for kind in ("rw", "overwrite"):
        at = lines.index(next(ln for ln in lines if ln.startswith("step %s:" % kind)))
        for ln in lines[at + 2:]:
            if not ln.strip():
                break
            name = ln[:24].strip()
            sync = ln[24:].split()[0] == "-"        # measured once, shown in both tables
            if not re.search(r"^phase %s, %s(, opened and warmed)?: %s s$"
                             % (re.escape(name), "rw" if sync else kind, NUM), out, re.M):
                fail("no phase line for %s, %s step" % (name, kind), out)
    if not re.search(r"^phases: .*2 ranks \d+ s.*; accounted \d+ of \d+ s$", out, re.M):
        fail("no phases summary", out)
    with open(js) as f:
        doc = json.load(f)
    for m in doc["methods"]:
        for k in ("cost_s", "returns_s", "durable_s"):
            v = m[k]
            if len(v) != saves or not all(isinstance(x, float) and math.isfinite(x) and x >= 0
                                          for x in v):
                fail("json: %s %s: %r" % (m["name"], k, v), out)
        if any(c < r_ - 1e-9 for c, r_ in zip(m["cost_s"], m["returns_s"])):
            fail("json: %s: a cost below its save call" % m["name"], out)
    r2 = doc["ranks2"]
    fb = [r2[str(r)]["firebreak"]["bytes"] for r in (0, 1)]
    one = r2["0"]["firebreak"]["state_bytes"]      # the 2-rank part's own state
    if not 0 < one <= doc["bytes"]:
        fail("2 ranks: a state of %d bytes beside the bench's %d" % (one, doc["bytes"]), out)
    if not 0.9 * one <= sum(fb) <= 1.2 * one or max(fb) > 0.75 * one:
        fail("2 ranks: firebreak wrote %s bytes per rank of a %d-byte state: not once"
             % (fb, one), out)
    if os.path.exists(data):
        fail("the bench left %s behind" % data, out)
    shutil.rmtree(root)
    sys.stdout.write(out)
    print("smoke: well-formed (%d methods measured, %d skipped)"
          % (len(doc["methods"]) // 2, len(skipped)))


if __name__ == "__main__":
    main()
