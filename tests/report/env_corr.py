#!/usr/bin/env python3
"""env_corr.py REPORT.json RUN_DIR: recompute the report's correlation of
GPU temperature and power with throughput from the run's two databases
(journal.sqlite step samples, agent.sqlite GPU samples), independently of
the C code, by the rule of docs/report.md (60 buckets over the run's wall
time, bucket means, Pearson r over the buckets where both are known, n/a
under 3 buckets or for a series that does not vary), and check the
report's numbers.  Prints the two values; exit 1 on a difference."""
import json
import math
import sqlite3
import sys

N = 60


def pearson(a, b):
    pts = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if len(pts) < 3:
        return None, len(pts)
    ma = sum(x for x, _ in pts) / len(pts)
    mb = sum(y for _, y in pts) / len(pts)
    va = sum((x - ma) ** 2 for x, _ in pts)
    vb = sum((y - mb) ** 2 for _, y in pts)
    saa = sum(x * x for x, _ in pts)
    sbb = sum(y * y for _, y in pts)
    if va <= 1e-12 * (saa if saa > 0 else 1) or vb <= 1e-12 * (sbb if sbb > 0 else 1):
        return None, len(pts)   # a series that does not vary: n/a
    cov = sum((x - ma) * (y - mb) for x, y in pts)
    return cov / math.sqrt(va * vb), len(pts)


def main():
    rep = json.loads(open(sys.argv[1]).read().splitlines()[-1])
    run = rep["runs"][0]
    t0, wall = run["started_at"], run["wall_s"]
    jdb = sqlite3.connect("file:%s/journal.sqlite?mode=ro" % sys.argv[2], uri=True)
    adb = sqlite3.connect("file:%s/agent.sqlite?mode=ro" % sys.argv[2], uri=True)

    def bucket(t):
        b = (t - t0) / wall * N
        return int(b) if 0 <= b < N else None

    def means(rows):
        s, c = [0.0] * N, [0] * N
        for t, v in rows:
            b = bucket(t)
            if b is None or v is None:
                continue
            s[b] += v
            c[b] += 1
        return [s[i] / c[i] if c[i] else None for i in range(N)]

    thr = means((t, 1000.0 / ms) for t, ms in jdb.execute(
        "SELECT time, step_time_ms FROM step_sample") if ms and ms > 0)
    env = adb.execute("SELECT t, avg(temp_c), avg(power_w) FROM gpu_samples "
                      "GROUP BY t ORDER BY t").fetchall()
    temp = means((t, c) for t, c, _ in env)
    power = means((t, p) for t, _, p in env)
    rt, nt = pearson(temp, thr)
    rp, np_ = pearson(power, thr)
    got = run["environment"]
    ok = True
    for name, want, n, key in (("temperature", rt, nt, "r_temp_throughput"),
                               ("power", rp, np_, "r_power_throughput")):
        have = got[key]
        if (want is None) != (have is None) or \
           (want is not None and abs(want - have) > 1e-5):
            print("env_corr: %s: report says %r, recomputed %r (%d buckets)"
                  % (name, have, want, n), file=sys.stderr)
            ok = False
    print("temperature r=%s power r=%s" % (rt, rp))
    sys.exit(0 if ok else 1)


main()
