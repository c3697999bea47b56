"""result.py -- bench_result.h for the Python parts of the benchmarks:
target() records one target in the results file `make bench` ends with
(bench/summary.sh prints the table).  The scripts put bench/ on PYTHONPATH."""
import os


def target(bench, what, measured, baseline, goal, met):
    """Record one target; returns met."""
    path = os.environ.get("FB_BENCH_RESULTS")
    if path:
        fields = [bench, what, measured, baseline, goal, "met" if met else "MISSED"]
        with open(path, "a") as f:
            f.write("\t".join(s.replace("\t", " ") for s in fields) + "\n")
    return met
