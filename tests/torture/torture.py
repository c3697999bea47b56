#!/usr/bin/env python3
"""torture.py -- seeded random fault schedules over the MPI trainer.

Each schedule runs examples/train_mlp.c (fb-train-mlp) on 2 ranks under
`firebreak run --launcher mpirun`, in one or more *legs* (separate
`firebreak run` invocations on the same --ckpt-dir), with faults drawn from
a PRNG seeded by the schedule's number: ranks killed, hung, stopped,
exiting with errors or SIGSEGV; shards corrupted by --inject, or corrupted,
truncated or deleted between legs; ranks killed while a save is in flight;
the checkpoint engine's crash points; a disk that fills mid-run (a small
tmpfs in a private mount namespace); the supervisor itself SIGKILLed and a
new `firebreak run` started on the same checkpoints.

Every schedule must end with the final weights bit-identical to a
fault-free reference run (computed once at the start), and leave nothing
behind: no process (the schedule's unique path appears in every command
line of the job), no /dev/shm segment (fb.<job>.*), no temporary file
(*.tmp, .deleted-*) in the checkpoint directory, no mount.  Where a leg's
faults make completion impossible (a disk that stays full, a crash point
hit by every rank), the leg must exit 1 and say why in the journal, and the
next leg must complete.

    torture.py FIREBREAK TRAINER
    FIREBREAK_TORTURE_SEED=N      run schedule N only (the replay)
    FIREBREAK_TORTURE_COUNT=N     schedules 1..N (default 55)
    FIREBREAK_TORTURE_FIRST=N     start at schedule N (default 1)
    FIREBREAK_TORTURE_KEEP=1      keep the scratch directory of failures
    FIREBREAK_TORTURE_VERBOSE=1   print every leg's command line
    FIREBREAK_TORTURE_BUDGET_S=S  start no schedule after S seconds (480)

docs/torture.md describes what it covers.
"""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

NPROC = 2
STEPS = 80
CKPT_EVERY = 10
SLEEP_MS = 25
TRAIN_ARGS = ["--steps", str(STEPS), "--hidden", "32", "--batch", "16",
              "--ckpt-every", str(CKPT_EVERY), "--log-every", "20",
              "--sleep-ms", str(SLEEP_MS)]
LEG_TIMEOUT_S = 60           # a leg that runs longer is a failure (a hang)
GONE_AFTER_EXIT_S = 3.0      # processes must be gone this soon after exit
GONE_AFTER_SIGKILL_S = 10.0  # ... after the supervisor was SIGKILLed
DEFAULT_COUNT = 55
BUDGET_S = 480               # no new schedule starts after this (ctest: 600)
TEXT = "/usr/share/common-licenses/GPL-3"   # the trainer's default text

# One schedule kind per seed, round robin, so that every kind runs at
# least COUNT // len(KINDS) times; the PRNG draws everything else.
KINDS = ["crashes", "hang", "corrupt", "save_kill", "crash_point",
         "sup_kill", "tamper", "disk_full", "after", "disk_transient",
         "mixed"]


class Rng:
    """splitmix64, like the trainer's: the same schedule on every Python."""

    @staticmethod
    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
        return z ^ (z >> 31)

    def __init__(self, seed):
        # The state starts at a hash of the seed: seeds N and N+1 must not
        # be the same stream shifted by one draw.
        self.s = self.mix((seed ^ 0x5EED5EED5EED) & (2**64 - 1))

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & (2**64 - 1)
        return self.mix(self.s)

    def int(self, lo, hi):          # lo..hi inclusive
        return lo + self.next() % (hi - lo + 1)

    def pick(self, xs):
        return xs[self.next() % len(xs)]

    def chance(self, p):
        return (self.next() >> 11) * 2.0**-53 < p

    def uniform(self, lo, hi):
        return lo + (hi - lo) * (self.next() >> 11) * 2.0**-53


# ---------------------------------------------------------------------------
# Schedules.  A schedule is a dict: kind, legs (list), and per leg:
#   inject   list of --inject specs        env     extra environment
#   expect   complete | fail | killed       kill_at seconds after start
#   max_restarts, crash_loop, grace, same_run_dir (reuse the previous leg's)
#   before   tampering with the checkpoints before the leg starts
#   disk     tmpfs size for this leg (disk-full schedules), fill (transient)
# ---------------------------------------------------------------------------

def ckpt_steps():
    return list(range(CKPT_EVERY, STEPS + 1, CKPT_EVERY))


def in_process_faults(r, n, kinds=("kill", "exit", "segv")):
    """n faults on attempts 0..n-1, each at a step of its own."""
    out, used = [], set()
    for a in range(n):
        step = r.int(3, STEPS - 2)
        while step in used:
            step = r.int(3, STEPS - 2)
        used.add(step)
        k = r.pick(list(kinds))
        spec = "%s:rank=%d,step=%d,attempt=%d" % (k, r.int(0, NPROC - 1), step, a)
        if k == "exit":
            spec += ",code=%d" % r.int(1, 9)
        out.append(spec)
    return out


def tamper_ops(r):
    ops = []
    for _ in range(r.int(1, 2)):
        ops.append({"which": r.pick(["newest", "newest", "second", "any"]),
                    "rank": r.int(0, NPROC - 1),
                    "how": r.pick(["flip", "truncate", "empty", "delete",
                                   "header"]),
                    "salt": r.int(0, 2**31)})
    return ops


def leg(**kw):
    d = {"inject": [], "env": {}, "expect": "complete", "kill_at": None,
         "max_restarts": 6, "crash_loop": 0, "grace": "2s",
         "same_run_dir": False, "before": [], "disk": None, "fill": None}
    d.update(kw)
    return d


def make_schedule(seed):
    r = Rng(seed)
    kind = KINDS[(seed - 1) % len(KINDS)]
    legs = []
    grace = r.pick(["1s", "2s", "2s"])
    if kind == "crashes":
        legs.append(leg(inject=in_process_faults(r, r.int(1, 3)), grace=grace))
    elif kind == "hang":
        how = r.pick(["in-process", "sigstop"])
        a = r.int(0, 1)
        if how == "in-process":
            spec = "hang:rank=%d,step=%d,attempt=%d" % (r.int(0, NPROC - 1),
                                                        r.int(5, STEPS - 3), a)
        else:
            spec = "hang:rank=%d,after=%.1fs,attempt=%d" % (
                r.int(0, NPROC - 1), r.uniform(0.6, 2.0), a)
        faults = [spec]
        if a == 1:
            faults += in_process_faults(r, 1)
        legs.append(leg(inject=faults, grace=grace))
    elif kind == "corrupt":
        faults = []
        for a in range(r.int(1, 2)):
            s = r.pick(ckpt_steps()[1:-1]) + r.int(1, 4)
            faults.append("corrupt:rank=%d,step=%d,attempt=%d" % (r.int(0, NPROC - 1), s, a))
            faults.append("%s:rank=%d,step=%d,attempt=%d" % (
                r.pick(["kill", "exit"]), r.int(0, NPROC - 1), s + r.int(1, 5), a))
        legs.append(leg(inject=faults, grace=grace))
    elif kind == "save_kill":
        faults = []
        for a in range(r.int(1, 2)):
            c = r.pick(ckpt_steps()[:-1])
            faults.append("kill:rank=%d,step=%d,attempt=%d" % (
                r.int(0, NPROC - 1), c + r.int(1, 3), a))
        legs.append(leg(inject=faults, grace=grace,
                        env={"FIREBREAK_CKPT_WRITE_DELAY_MS": str(r.int(150, 400))}))
    elif kind == "crash_point":
        point = r.pick(["before_rename", "after_rename", "during_delete"])
        c = r.pick(ckpt_steps()[2:-1] if point == "during_delete" else ckpt_steps()[:-1])
        # before_rename: every rank dies before its commit, in every
        # attempt (the restart saves the same step again): a crash loop,
        # exit 1.  after_rename and during_delete: the checkpoint may be
        # complete (the restart resumes after it and completes) or not
        # (a rank was stopped before its own commit: a crash loop).
        legs.append(leg(env={"FIREBREAK_CKPT_CRASH_AT": "%s@%d" % (point, c)},
                        max_restarts=r.int(0, 2), crash_loop=2,
                        expect="fail" if point == "before_rename" else "either",
                        grace=grace))
        legs.append(leg(inject=in_process_faults(r, r.int(0, 1)),
                        same_run_dir=r.chance(0.5), grace=grace))
    elif kind == "sup_kill":
        for _ in range(r.int(1, 2)):
            legs.append(leg(inject=in_process_faults(r, r.int(0, 1)),
                            kill_at=r.uniform(0.4, 2.6), expect="killed",
                            same_run_dir=r.chance(0.5), grace=grace,
                            env={"FIREBREAK_CKPT_WRITE_DELAY_MS": str(r.int(0, 200))}))
        legs.append(leg(inject=in_process_faults(r, r.int(0, 1)),
                        same_run_dir=r.chance(0.5), grace=grace))
    elif kind == "tamper":
        if r.chance(0.5):
            legs.append(leg(kill_at=r.uniform(1.2, 2.4), expect="killed", grace=grace))
        else:
            c = r.pick(ckpt_steps()[2:-1])
            legs.append(leg(env={"FIREBREAK_CKPT_CRASH_AT": "before_rename@%d" % c},
                            max_restarts=0, expect="fail", grace=grace))
        # Sometimes every checkpoint is corrupt: the ranks must start
        # afresh, from the same weights as the reference.
        ops = [{"which": "every", "how": "flip", "rank": -1, "salt": 0}] \
            if r.chance(0.3) else tamper_ops(r)
        legs.append(leg(before=ops, inject=in_process_faults(r, r.int(0, 1)),
                        same_run_dir=r.chance(0.5), grace=grace))
    elif kind == "disk_full":
        # 2 ranks x ~98 KiB shards: 300-500 KiB holds 1-2 checkpoints, so
        # the disk fills at step 20-30 and every later save fails, in every
        # attempt: the run cannot complete.  Then space is given back.
        size = r.pick(["300k", "400k", "500k"])
        on_disk = r.chance(0.4)   # the run directory (journal, logs) too
        legs.append(leg(disk={"size": size, "run_dir_on_disk": on_disk},
                        max_restarts=r.int(1, 3), crash_loop=2, expect="fail",
                        grace=grace))
        legs.append(leg(disk={"size": "64m", "run_dir_on_disk": on_disk},
                        same_run_dir=True, grace=grace,
                        inject=in_process_faults(r, r.int(0, 1))))
    elif kind == "disk_transient":
        start = r.uniform(0.3, 1.5)
        legs.append(leg(disk={"size": "16m", "run_dir_on_disk": False},
                        fill={"at": start, "for": r.uniform(0.5, 1.5)},
                        max_restarts=6, crash_loop=0, grace=grace,
                        inject=in_process_faults(r, r.int(0, 1))))
    elif kind == "after":
        faults = []
        for a in range(r.int(1, 2)):
            faults.append("%s:rank=%d,after=%.1fs,attempt=%d" % (
                r.pick(["kill", "segv", "kill"]), r.int(0, NPROC - 1),
                r.uniform(0.4, 2.4), a))
        legs.append(leg(inject=faults, grace=grace))
    elif kind == "mixed":
        nlegs = r.int(1, 3)
        for i in range(nlegs):
            last = i == nlegs - 1
            faults = in_process_faults(r, r.int(0, 2))
            env = {}
            if r.chance(0.4):
                env["FIREBREAK_CKPT_WRITE_DELAY_MS"] = str(r.int(100, 300))
                c = r.pick(ckpt_steps()[:-1])
                faults.append("kill:rank=%d,step=%d,attempt=%d" % (
                    r.int(0, NPROC - 1), c + r.int(1, 2), len(faults)))
            if r.chance(0.3):
                s = r.int(15, STEPS - 8)
                faults.append("corrupt:rank=%d,step=%d,attempt=%d" % (
                    r.int(0, NPROC - 1), s, len(faults)))
                faults.append("kill:rank=%d,step=%d,attempt=%d" % (
                    r.int(0, NPROC - 1), s + r.int(1, 4), len(faults) - 1))
            before = tamper_ops(r) if i > 0 and r.chance(0.5) else []
            legs.append(leg(inject=faults, env=env, before=before,
                            same_run_dir=r.chance(0.5), grace=grace,
                            kill_at=None if last else r.uniform(0.5, 3.0),
                            expect="complete" if last else "killed"))
    return {"seed": seed, "kind": kind, "legs": legs}


# ---------------------------------------------------------------------------
# Running a schedule
# ---------------------------------------------------------------------------

def die_with_parent(sig=signal.SIGTERM):
    """preexec_fn: the child gets `sig` when this script dies, even by
    SIGKILL (a ctest timeout): a supervisor stops its job on SIGTERM."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    return lambda: libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG


class Ctx:
    fb = trainer = data = root = None
    verbose = False


def pgrep_tag(tag):
    out = subprocess.run(["pgrep", "-f", "--", tag], capture_output=True, text=True)
    me = {os.getpid()}
    return [int(p) for p in out.stdout.split() if int(p) not in me]


def ps_of(pids):
    if not pids:
        return ""
    out = subprocess.run(["ps", "-o", "pid,ppid,stat,args", "-p",
                          ",".join(map(str, pids))], capture_output=True, text=True)
    return out.stdout.strip()


def wait_gone(tag, limit_s):
    t0 = time.monotonic()
    while True:
        left = pgrep_tag(tag)
        if not left or time.monotonic() - t0 > limit_s:
            return left
        time.sleep(0.05)


def kill_tag(tag):
    for _ in range(50):
        left = pgrep_tag(tag)
        if not left:
            return
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def complete_steps(ck):
    """Steps whose shards 0..NPROC-1 are all committed, newest first."""
    out = []
    try:
        names = os.listdir(ck)
    except OSError:
        return out
    for n in names:
        if not n.startswith("step-"):
            continue
        d = os.path.join(ck, n)
        if all(os.path.exists(os.path.join(d, "rank-%05d.safetensors" % q))
               for q in range(NPROC)):
            out.append(int(n[5:]))
    return sorted(out, reverse=True)


def tamper_every(ck, notes):
    """Flip a byte in the last tensor of every shard of every complete
    checkpoint: each rank reads a whole shard into its tensors before the
    last hash fails, and then has no checkpoint to restore."""
    steps = complete_steps(ck)
    for step in steps:
        for q in range(NPROC):
            path = os.path.join(ck, "step-%010d" % step, "rank-%05d.safetensors" % q)
            with open(path, "r+b") as f:
                f.seek(-3, os.SEEK_END)
                b = f.read(1)
                f.seek(-3, os.SEEK_END)
                f.write(bytes([b[0] ^ 0x10]))
    notes.append("flipped a byte in the last tensor of every shard of steps %s" %
                 ",".join(map(str, sorted(steps))))


def tamper(ck, ops, notes):
    steps = complete_steps(ck)
    for op in ops:
        if op["which"] == "every":
            tamper_every(ck, notes)
            continue
        if not steps:
            notes.append("tamper %s: no complete checkpoint" % op["how"])
            continue
        if op["which"] == "newest":
            step = steps[0]
        elif op["which"] == "second":
            step = steps[min(1, len(steps) - 1)]
        else:
            step = steps[op["salt"] % len(steps)]
        path = os.path.join(ck, "step-%010d" % step, "rank-%05d.safetensors" % op["rank"])
        if not os.path.exists(path):
            notes.append("tamper %s: %s already gone" % (op["how"], path))
            continue
        size = os.path.getsize(path)
        how = op["how"]
        if how == "flip":
            off = 8 + op["salt"] % max(1, size - 8)
            with open(path, "r+b") as f:
                f.seek(off)
                b = f.read(1)
                f.seek(off)
                f.write(bytes([b[0] ^ (1 << (op["salt"] % 8))]))
            what = "flipped a bit at byte %d" % off
        elif how == "truncate":
            n = op["salt"] % size
            os.truncate(path, n)
            what = "truncated to %d bytes" % n
        elif how == "empty":
            os.truncate(path, 0)
            what = "emptied"
        elif how == "delete":
            os.unlink(path)
            what = "deleted"
        else:  # header: garble the JSON header's first bytes
            with open(path, "r+b") as f:
                f.seek(8)
                f.write(b"\x00{]")
            what = "garbled the header"
        notes.append("step %d rank %d: %s" % (step, op["rank"], what))


def journal_query(run_dir, sql):
    path = os.path.join(run_dir, "journal.sqlite")
    try:
        con = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=5)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()
    except sqlite3.Error as e:
        return [("journal error: %s" % e,)]


class Filler(threading.Thread):
    """Fills the disk at `at` seconds and frees it `for` seconds later."""

    def __init__(self, path, at, hold):
        super().__init__(daemon=True)
        self.path, self.at, self.hold = path, at, hold
        self.stop = threading.Event()

    def run(self):
        if self.stop.wait(self.at):
            return
        try:
            with open(self.path, "wb") as f:
                chunk = b"\xff" * (1 << 20)
                while True:
                    try:
                        f.write(chunk)
                        f.flush()
                    except OSError:
                        break
            with open(self.path, "ab") as f:  # the last partial MiB too
                for _ in range(256):
                    try:
                        f.write(b"\xff" * 4096)
                        f.flush()
                    except OSError:
                        break
        except OSError:
            pass
        self.stop.wait(self.hold)
        try:
            os.unlink(self.path)
        except OSError:
            pass


def where_stuck(pid, tag):
    """Evidence from a leg that never ended: its processes, the
    supervisor's kernel stack and, with gdb, its threads' backtraces."""
    pids = sorted(set(pgrep_tag(tag)) | {pid})
    out = subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:24,etimes,args", "-p",
                          ",".join(map(str, pids))], capture_output=True, text=True).stdout
    try:
        out += "kernel stack of %d:\n%s" % (pid, open("/proc/%d/stack" % pid).read())
    except OSError:
        pass
    if shutil.which("gdb"):
        g = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex",
                            "thread apply all bt"], capture_output=True, text=True,
                           timeout=60)
        out += "\n".join(l for l in g.stdout.splitlines() if l.startswith(("#", "Thread")))
    return out


def run_leg(i, lg, sdir, ck, prev_run_dir, tag, res):
    """Run one leg; append its findings to res['errors']."""
    errs = res["errors"]
    if lg["same_run_dir"] and prev_run_dir:
        run_dir = prev_run_dir
    elif lg["disk"] and lg["disk"]["run_dir_on_disk"]:
        run_dir = os.path.join(sdir, "disk", "run-%d" % i)
    else:
        run_dir = os.path.join(sdir, "run-%d" % i)
    notes = []
    if lg["before"]:
        tamper(ck, lg["before"], notes)
    try:
        os.unlink(os.path.join(run_dir, "final_hash"))
    except OSError:
        pass
    cmd = [Ctx.fb, "run", "--launcher", "mpirun", "--nproc-per-node", str(NPROC),
           "--run-dir", run_dir, "--ckpt-dir", ck, "--hang-timeout", "1s",
           "--startup-timeout", "30s", "--grace", lg["grace"],
           "--max-restarts", str(lg["max_restarts"]),
           "--crash-loop", str(lg["crash_loop"]), "--json"]
    for spec in lg["inject"]:
        cmd += ["--inject", spec]
    cmd += ["--", Ctx.trainer, "--data", Ctx.data] + TRAIN_ARGS
    env = dict(os.environ)
    for k in ("FIREBREAK_CKPT_CRASH_AT", "FIREBREAK_CKPT_FAIL",
              "FIREBREAK_CKPT_WRITE_DELAY_MS", "FIREBREAK_INJECT"):
        env.pop(k, None)
    env.update(lg["env"])
    if Ctx.verbose:
        print("    leg %d: %s %s" % (i, " ".join("%s=%s" % kv for kv in lg["env"].items()),
                                    " ".join(cmd)), flush=True)
    out_path = os.path.join(sdir, "leg-%d.out" % i)
    err_path = os.path.join(sdir, "leg-%d.err" % i)
    filler = None
    if lg["fill"]:
        filler = Filler(os.path.join(sdir, "disk", "filler"), lg["fill"]["at"],
                        lg["fill"]["for"])
    t0 = time.monotonic()
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env,
                             preexec_fn=die_with_parent())
        if filler:
            filler.start()
        killed = False
        try:
            if lg["kill_at"] is not None:
                try:
                    p.wait(timeout=lg["kill_at"])
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    killed = True
            rc = p.wait(timeout=LEG_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            errs.append("leg %d: firebreak run still running after %d s; killed. "
                        "Where it was:\n%s" % (i, LEG_TIMEOUT_S, where_stuck(p.pid, tag)))
            os.kill(p.pid, signal.SIGKILL)
            rc = p.wait()
        finally:
            if filler:
                filler.stop.set()
                filler.join()
    wall = time.monotonic() - t0
    info = {"leg": i, "rc": rc, "killed": killed, "wall_s": round(wall, 1),
            "run_dir": run_dir, "tamper": notes}
    res["legs"].append(info)
    try:
        job = open(os.path.join(run_dir, "job")).read().strip()
        res["jobs"].append(job)
    except OSError:
        job = None
    left = wait_gone(tag, GONE_AFTER_SIGKILL_S if killed else GONE_AFTER_EXIT_S)
    if left:
        errs.append("leg %d: %s: processes left %.0f s after firebreak run ended:\n%s" %
                    (i, "supervisor SIGKILLed" if killed else "exited %d" % rc,
                     GONE_AFTER_SIGKILL_S if killed else GONE_AFTER_EXIT_S, ps_of(left)))
        kill_tag(tag)
    summary = None
    try:
        lines = open(out_path).read().strip().splitlines()
        summary = json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        summary = None
    if summary:
        info["attempts"] = summary.get("attempts")
        info["reason"] = summary.get("reason")
        info["incidents"] = ["%s r%s s%s a%s" % (x["kind"], x["rank"], x["step"], x["attempt"])
                             for x in summary.get("incidents", [])]
    err_tail = ""
    try:
        err_tail = "\n".join(open(err_path, errors="replace").read().splitlines()[-8:])
    except OSError:
        pass
    if not killed:
        journal_checks(i, lg, run_dir, errs)
        journal_run_status(i, lg, rc, run_dir, errs)
        check_outcome(i, lg, rc, summary, run_dir, err_path, err_tail, res)
    return run_dir


def check_outcome(i, lg, rc, summary, run_dir, err_path, err_tail, res):
    """The leg ended as its faults allow: completed with a hash, or exit 1
    with the reason recorded."""
    errs = res["errors"]
    expect = lg["expect"]
    if lg["kill_at"] is not None and rc == 0:
        expect = "complete"   # it finished before the kill was due
    if expect == "either":
        expect = "complete" if rc == 0 else "fail"
    if expect in ("complete", "killed"):
        if rc != 0:
            errs.append("leg %d: expected completion, firebreak run exited %d (%s)\n%s" %
                        (i, rc, summary.get("reason") if summary else "no JSON summary",
                         err_tail))
            return
        if not summary or summary.get("completed") is not True:
            errs.append("leg %d: exit 0 but the JSON summary does not say completed: %s" %
                        (i, summary))
        try:
            h = open(os.path.join(run_dir, "final_hash")).read().strip()
        except OSError:
            h = None
        res["final_hash"] = h
    elif expect == "fail":
        if rc != 1:
            errs.append("leg %d: expected exit 1 (the faults make completion impossible), "
                        "got %d\n%s" % (i, rc, err_tail))
        if lg["disk"]:
            # The journal (or, when the journal itself is on the full disk,
            # the console) must say the disk was full.
            rows = journal_query(run_dir, "select count(*) from event where "
                                 "kind='ckpt_failed' and code=-28")
            said = rows and rows[0][0] not in (0, None) and not isinstance(rows[0][0], str)
            if not said and not lg["disk"]["run_dir_on_disk"]:
                errs.append("leg %d: disk full, but the journal has no ckpt_failed "
                            "event with ENOSPC (%s)" % (i, rows))
            if not said and lg["disk"]["run_dir_on_disk"]:
                txt = open(err_path, errors="replace").read()
                if "No space left on device" not in txt:
                    errs.append("leg %d: disk full (run directory on it too): neither "
                                "the journal nor the console says so\n%s" % (i, err_tail))
        elif "FIREBREAK_CKPT_CRASH_AT" in lg["env"]:
            rows = journal_query(run_dir, "select count(*) from incident where kind='crash'")
            if not rows or rows[0][0] in (0, None) or isinstance(rows[0][0], str):
                errs.append("leg %d: ranks SIGKILLed at a crash point, but the journal "
                            "has no crash incident (%s)" % (i, rows))


def mixed_restore_lines(run_dir, attempt):
    """The trainer's complaint that ranks restored different steps, from
    any rank's output of that attempt (mpirun keeps one file per rank)."""
    d = os.path.join(run_dir, "logs", "mpirun-attempt-%d" % attempt, "1")
    out = ""
    for rank in range(NPROC):
        try:
            txt = open(os.path.join(d, "rank.%d" % rank, "stderr"), errors="replace").read()
        except OSError:
            continue
        out += "".join("\n" + l for l in txt.splitlines()
                       if "ranks restored different steps" in l)
    return out


def journal_checks(i, lg, run_dir, errs):
    """What the journal of the leg's run says about its attempts."""
    rows = journal_query(run_dir, """
        select a.number, i.kind, i.rank, i.step, i.phase, coalesce(i.injected, ''),
               i.detail, coalesce(i.last_lines, ''), i.detected_at, a.ended_at
        from incident i join attempt a on a.id = i.attempt_id
        where i.run_id = (select max(id) from run)
          and i.kind in ('crash', 'hang', 'error_exit')""")
    if rows and isinstance(rows[0][0], str):
        errs.append("leg %d: %s" % (i, rows[0][0]))
        return
    # Hooks that fail attempts by themselves (the write delay does not).
    hooks = (lg["disk"] or lg["fill"] or "FIREBREAK_CKPT_CRASH_AT" in lg["env"]
             or "FIREBREAK_CKPT_FAIL" in lg["env"])
    grace = float(lg["grace"].rstrip("s"))
    for (num, kind, rank, step, phase, injected, detail, last, det, ended) in rows:
        if "ranks restored different steps" not in last:
            last += mixed_restore_lines(run_dir, num)
        if "ranks restored different steps" in last:
            errs.append("leg %d attempt %d: the ranks restored different checkpoints "
                        "and the attempt failed (%s rank %s in %s): the checkpoint was "
                        "not verified as a whole before this attempt\n%s" %
                        (i, num, kind, rank, phase, last.strip()))
        elif not injected and not hooks:
            errs.append("leg %d attempt %d: %s of rank %s at step %s in %s that no "
                        "injected fault explains: %s\n%s" %
                        (i, num, kind, rank, step, phase, detail, last.strip()))
        if ended is not None and det is not None and ended - det > grace + 3:
            errs.append("leg %d attempt %d: stopping the ranks took %.1f s after the %s "
                        "was detected (--grace %s)" % (i, num, ended - det, kind,
                                                       lg["grace"]))


def journal_run_status(i, lg, rc, run_dir, errs):
    """The journal's run row ends as the command did.  Not required when
    the journal itself is on a full disk."""
    if lg["disk"] and lg["disk"]["run_dir_on_disk"] and lg["expect"] == "fail":
        return
    want = {0: "completed", 1: "failed"}.get(rc)
    rows = journal_query(run_dir, "select status, exit_code, ended_at is not null "
                         "from run order by id desc limit 1")
    if want and (not rows or tuple(rows[0]) != (want, rc, 1)):
        errs.append("leg %d: firebreak run exited %d, the journal's run row says "
                    "(status, exit_code, ended) = %s" % (i, rc, rows[0] if rows else None))


def check_ckpt_dir(ck, errs):
    bad = []
    for dirpath, dirnames, filenames in os.walk(ck):
        for n in filenames + dirnames:
            if n.endswith(".tmp") or n.startswith(".deleted-"):
                bad.append(os.path.join(dirpath, n))
    if bad:
        errs.append("temporary files left in the checkpoint directory: %s" % ", ".join(
            os.path.relpath(b, ck) for b in sorted(bad)))


def run_legs(sched, sdir, tag, res):
    """Every leg of a schedule, then the checks of its checkpoint directory.
    Runs in a private mount namespace for disk-full schedules."""
    disk = os.path.join(sdir, "disk")
    uses_disk = any(lg["disk"] for lg in sched["legs"])
    ck = os.path.join(disk if uses_disk else sdir, "ckpt")
    prev = None
    for i, lg in enumerate(sched["legs"]):
        if lg["disk"]:
            os.makedirs(disk, exist_ok=True)
            opt = "size=%s" % lg["disk"]["size"]
            if os.path.ismount(disk):
                mcmd = ["mount", "-o", "remount," + opt, disk]
            else:
                mcmd = ["mount", "-t", "tmpfs", "-o", opt, "fb-torture", disk]
            m = subprocess.run(mcmd, capture_output=True, text=True)
            if m.returncode:
                res["errors"].append("cannot mount: %s" % m.stderr.strip())
                return
        # Every leg runs, whatever an earlier one found: the last one must
        # still complete with the reference weights.
        res["final_hash"] = None
        prev = run_leg(i, lg, sdir, ck, prev, tag, res)
    check_ckpt_dir(ck, res["errors"])


def shm_left(jobs):
    left = []
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return left
    for job in jobs:
        left += [n for n in names if n.startswith("fb.%s." % job)]
    return left


def mounts_under(path):
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            if mp == path or mp.startswith(path + "/"):
                out.append(mp)
    return out


def run_schedule(sched, ref_hash):
    sdir = tempfile.mkdtemp(prefix="s%d-" % sched["seed"], dir=Ctx.root)
    # The tag is in every command line of the job: the supervisor's and its
    # shims' (--run-dir), mpirun's and the ranks' (--data).
    tag = sdir
    Ctx.data = os.path.join(sdir, "text")
    shutil.copyfile(TEXT, Ctx.data)
    res = {"legs": [], "jobs": [], "errors": [], "final_hash": None}
    uses_disk = any(lg["disk"] for lg in sched["legs"])
    t0 = time.monotonic()
    if uses_disk:
        # A private mount namespace: the tmpfs goes away with it, whatever
        # happens.  The schedule goes through the environment, so that no
        # command line but the job's holds the tag.
        env = dict(os.environ)
        env["FIREBREAK_TORTURE_INNER"] = json.dumps(
            {"sched": sched, "sdir": sdir, "fb": Ctx.fb, "trainer": Ctx.trainer,
             "data": Ctx.data, "verbose": Ctx.verbose})
        p = subprocess.run(["unshare", "-m", "--propagation", "private",
                            sys.executable, os.path.abspath(__file__), "--inner"],
                           env=env, capture_output=True, text=True,
                           timeout=LEG_TIMEOUT_S * (len(sched["legs"]) + 1),
                           preexec_fn=die_with_parent(signal.SIGKILL))
        try:
            res = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            res["errors"].append("inner run failed (exit %d): %s %s" %
                                 (p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        if Ctx.verbose and p.stdout:
            print(p.stdout.rstrip("\n").rsplit("\n", 1)[0] if "\n" in p.stdout else "",
                  flush=True)
    else:
        run_legs(sched, sdir, tag, res)
    errs = res["errors"]
    last = res["legs"][-1] if len(res["legs"]) == len(sched["legs"]) else None
    if last and last["rc"] == 0 and sched["legs"][-1]["expect"] == "complete":
        if res["final_hash"] != ref_hash:
            errs.append("final weights hash %s, fault-free reference %s" %
                        (res["final_hash"], ref_hash))
    left = wait_gone(tag, GONE_AFTER_EXIT_S)
    if left:
        errs.append("processes left at the end:\n%s" % ps_of(left))
        kill_tag(tag)
    shm = shm_left(res["jobs"])
    if shm:
        errs.append("/dev/shm entries left: %s" % ", ".join(sorted(shm)))
    mnt = mounts_under(sdir)
    if mnt:
        errs.append("mounts left: %s" % ", ".join(mnt))
        for m in reversed(mnt):
            subprocess.run(["umount", "-l", m], capture_output=True)
    res["wall_s"] = round(time.monotonic() - t0, 1)
    res["sdir"] = sdir
    return res


def inner_main():
    spec = json.loads(os.environ.pop("FIREBREAK_TORTURE_INNER"))
    Ctx.fb, Ctx.trainer, Ctx.data = spec["fb"], spec["trainer"], spec["data"]
    Ctx.verbose = spec["verbose"]
    res = {"legs": [], "jobs": [], "errors": [], "final_hash": None}
    sdir = spec["sdir"]
    try:
        run_legs(spec["sched"], sdir, sdir, res)
    except Exception as e:  # report, never hide
        res["errors"].append("inner: %r" % e)
    finally:
        kill_tag(sdir)
        disk = os.path.join(sdir, "disk")
        if os.path.ismount(disk):
            subprocess.run(["umount", "-l", disk], capture_output=True)
    print(json.dumps(res), flush=True)
    return 0


def describe(sched):
    parts = []
    for i, lg in enumerate(sched["legs"]):
        d = []
        if lg["same_run_dir"] and i > 0:
            d.append("same --run-dir")
        if lg["before"]:
            d.append("tamper " + "+".join("%s(%s,r%d)" % (o["how"], o["which"], o["rank"])
                                          for o in lg["before"]))
        if lg["disk"]:
            d.append("tmpfs %s%s" % (lg["disk"]["size"],
                                     " (run dir on it)" if lg["disk"]["run_dir_on_disk"] else ""))
        if lg["fill"]:
            d.append("disk full at %.1fs for %.1fs" % (lg["fill"]["at"], lg["fill"]["for"]))
        d += ["%s=%s" % kv for kv in lg["env"].items()]
        d += lg["inject"]
        if lg["kill_at"] is not None:
            d.append("SIGKILL supervisor at %.1fs" % lg["kill_at"])
        d.append("grace %s, expect %s" % (lg["grace"], lg["expect"]))
        parts.append("leg %d: %s" % (i, "; ".join(d)))
    return "\n      ".join(parts)


def reference_hash():
    sdir = tempfile.mkdtemp(prefix="reference-", dir=Ctx.root)
    Ctx.data = os.path.join(sdir, "text")
    shutil.copyfile(TEXT, Ctx.data)
    cmd = [Ctx.fb, "run", "--launcher", "mpirun", "--nproc-per-node", str(NPROC),
           "--run-dir", os.path.join(sdir, "run"), "--quiet", "--json", "--",
           Ctx.trainer, "--data", Ctx.data] + TRAIN_ARGS
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIREBREAK_")}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=LEG_TIMEOUT_S,
                       preexec_fn=die_with_parent())
    if p.returncode:
        sys.exit("FAIL: the fault-free reference run exited %d:\n%s" %
                 (p.returncode, p.stderr[-3000:]))
    h = open(os.path.join(sdir, "run", "final_hash")).read().strip()
    left = wait_gone(sdir, GONE_AFTER_EXIT_S)
    if left:
        sys.exit("FAIL: the fault-free reference run left processes:\n%s" % ps_of(left))
    return h


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--inner":
        return inner_main()
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    Ctx.fb, Ctx.trainer = map(os.path.abspath, sys.argv[1:3])
    Ctx.verbose = os.environ.get("FIREBREAK_TORTURE_VERBOSE") == "1"
    keep = os.environ.get("FIREBREAK_TORTURE_KEEP") == "1"
    if os.environ.get("FIREBREAK_TORTURE_SEED"):
        seeds = [int(os.environ["FIREBREAK_TORTURE_SEED"])]
    else:
        first = int(os.environ.get("FIREBREAK_TORTURE_FIRST", "1"))
        count = int(os.environ.get("FIREBREAK_TORTURE_COUNT", str(DEFAULT_COUNT)))
        seeds = list(range(first, first + count))
    if shutil.which("mpirun") is None:
        print("SKIP: no mpirun")
        return 77
    root_user = os.geteuid() == 0 and shutil.which("unshare") is not None
    os.environ["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    Ctx.root = tempfile.mkdtemp(prefix="fb-torture-%d-" % os.getpid())

    def on_signal(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    failed, skipped = [], []
    t_start = time.monotonic()
    try:
        ref = reference_hash()
        print("reference (no faults): final_hash %s, %d ranks, %d steps" % (ref, NPROC, STEPS),
              flush=True)
        budget = float(os.environ.get("FIREBREAK_TORTURE_BUDGET_S", BUDGET_S))
        for n, seed in enumerate(seeds):
            if time.monotonic() - t_start > budget:
                print("time budget of %.0f s spent: schedules %s not run" %
                      (budget, " ".join(map(str, seeds[n:]))), flush=True)
                skipped += seeds[n:]
                break
            sched = make_schedule(seed)
            if not root_user and any(lg["disk"] for lg in sched["legs"]):
                print("seed %3d %-14s SKIP (disk full needs root and unshare)" %
                      (seed, sched["kind"]), flush=True)
                skipped.append(seed)
                continue
            res = run_schedule(sched, ref)
            legs = " | ".join("rc %s%s%s" % (
                "KILL" if l["killed"] else l["rc"],
                " [" + ", ".join(l.get("incidents") or []) + "]" if l.get("incidents") else "",
                " tamper: " + "; ".join(l["tamper"]) if l["tamper"] else "")
                for l in res["legs"])
            status = "FAIL" if res["errors"] else "ok"
            print("seed %3d %-14s %-4s %5.1fs  %s" % (seed, sched["kind"], status,
                                                      res["wall_s"], legs), flush=True)
            if res["errors"]:
                failed.append(seed)
                print("    schedule:\n      " + describe(sched))
                for e in res["errors"]:
                    print("    FAIL: " + e.replace("\n", "\n          "))
                print("    replay: FIREBREAK_TORTURE_SEED=%d FIREBREAK_TORTURE_VERBOSE=1 "
                      "python3 %s %s %s" % (seed, os.path.abspath(__file__), Ctx.fb,
                                            Ctx.trainer))
                if keep:
                    print("    kept: %s" % res["sdir"])
            if not (keep and res["errors"]):
                shutil.rmtree(res["sdir"], ignore_errors=True)
            sys.stdout.flush()
    except KeyboardInterrupt as e:
        print("interrupted (%s)" % e)
        failed.append("interrupted")
    finally:
        kill_tag(Ctx.root)
        for m in reversed(mounts_under(Ctx.root)):
            subprocess.run(["umount", "-l", m], capture_output=True)
        if not (keep and failed):
            shutil.rmtree(Ctx.root, ignore_errors=True)
    wall = time.monotonic() - t_start
    ran = len(seeds) - len(skipped)
    print("torture: %d schedules, %d failed%s, %d skipped, %.0f s" % (
        ran, len(failed), " (seeds %s)" % " ".join(map(str, failed)) if failed else "",
        len(skipped), wall))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
