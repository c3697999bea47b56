"""A watcher started by hand in the background of a terminal (`firebreak
watch ... &` from an interactive shell): its stdin is the terminal, and
someone types at it.  The watcher must not be stopped by SIGTTIN (its
`alive` lines would stop with it): it reads no requests from a terminal it
runs in the background of, and says so.  Run in a directory of the test's
own; exits 0 when the watcher ran on, 1 with the reason otherwise.

    python3 watch_bgtty.py FIREBREAK JOB
"""
import os
import pty
import subprocess
import sys
import time

fb, job = sys.argv[1], sys.argv[2]
pid, master = pty.fork()
if pid == 0:  # a session with the terminal; the watcher in a group of its own
    with open("w.out", "w") as out, open("w.err", "w") as err:
        w = subprocess.Popen([fb, "watch", "--job", job, "--attempt", "0",
                              "--ranks-per-node", "1", "--world", "1", "--node-id", "0",
                              "--interval", "0.1"],
                             stdout=out, stderr=err, process_group=0)
        time.sleep(0.5)
        os.write(1, b"ready\n")
        time.sleep(1.5)  # meanwhile the terminal's input arrives
        with open(f"/proc/{w.pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        w.kill()
        w.wait()
    os.write(1, ("STATE %s\n" % state).encode())
    os._exit(0)

buf = b""
typed = False
while True:
    try:
        d = os.read(master, 1024)
    except OSError:
        break
    if not d:
        break
    buf += d
    if not typed and b"ready" in buf:
        os.write(master, b"snap 0\n")  # someone types at the terminal
        typed = True
os.waitpid(pid, 0)
text = buf.decode(errors="replace")
state = text.split("STATE ")[-1].strip()[:1] if "STATE " in text else "?"
if state in ("T", "t", "?"):
    sys.exit(f"the watcher was stopped (state {state}): {text!r}")
with open("w.err") as f:
    err = f.read()
if "no requests are read from it" not in err:
    sys.exit(f"not said: {err!r}")
with open("w.out") as f:
    beats = sum(1 for line in f if line.startswith("fbw1 alive"))
if beats < 5:
    sys.exit(f"{beats} alive lines in 2 s at an interval of 0.1 s")
print(f"ran on (state {state}), {beats} alive lines")
