#!/bin/bash
# agent_stall.sh FIREBREAK NVML_DOUBLE FIXTURES -- 300 connections that
# send "GET /met" and stall (then 100 that send a request whose body never
# ends) cannot hold the agent's connection cap: a
# scrape right after them is served within 2 s (not after the idle
# timeout), the agent is still serving once they are gone, and its log is
# not flooded by them.
set -u
fb=$1 double=$2 fx=$3
tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export FIREBREAK_NVML_LIB=$double FIREBREAK_NVML_SCENARIO=$fx/healthy/nvml.txt

"$fb" agent --root "$fx/healthy" --listen 127.0.0.1:0 --port-file "$tmp/port" \
    --interval 200ms --quiet 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || { echo "FAIL: agent did not write its port"; cat "$tmp/err"; exit 1; }
port=$(cat "$tmp/port")

# The stalling client: opens its sockets, then scrapes while they are all
# still open (curl, at most 2 s), then closes everything.  Bounded: 300
# sockets, 5 s to open them, 2 s for each scrape.
timeout 30 python3 - "$port" "$fb" <<'PY' || fail "a scrape was not served while 300 partial requests were open"
import socket, subprocess, sys, time
port = int(sys.argv[1])
socks, t0 = [], time.monotonic()
try:
    for i in range(300):
        if time.monotonic() - t0 > 5:
            sys.exit("opening 300 connections took over 5 s (%d open)" % i)
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"GET /met")
        socks.append(s)
    time.sleep(0.3)  # the agent has accepted them
    t1 = time.monotonic()
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                        "--max-time", "2",
                        "http://127.0.0.1:%d/metrics" % port],
                       capture_output=True, text=True)
    took = time.monotonic() - t1
    if r.stdout != "200":
        sys.exit("scrape with 300 stalled connections open: HTTP '%s' after "
                 "%.2f s (curl exit %d)" % (r.stdout, took, r.returncode))
    print("scrape served in %.3f s with 300 stalled connections" % took)
    # the same with complete headers and a body that never finishes
    for s in socks:
        s.close()
    socks = []
    for i in range(100):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 100000\r\n\r\nabc")
        socks.append(s)
    time.sleep(0.3)
    t1 = time.monotonic()
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                        "--max-time", "2",
                        "http://127.0.0.1:%d/metrics" % port],
                       capture_output=True, text=True)
    took = time.monotonic() - t1
    if r.stdout != "200":
        sys.exit("scrape with 100 unfinished request bodies open: HTTP '%s' "
                 "after %.2f s (curl exit %d)" % (r.stdout, took, r.returncode))
    print("scrape served in %.3f s with 100 unfinished bodies" % took)
finally:
    for s in socks:
        s.close()
PY
# 100 clients that pipeline requests and never read the answers: each
# connection stays busy, its answer unsent.  They held every slot, and a
# scrape got an empty reply until libmicrohttpd's 3 s timeout: now the one
# busy the longest gives way to a new connection.
timeout 30 python3 - "$port" <<'PY' || fail "a scrape was not served while 100 clients pipelined without reading"
import socket, subprocess, sys, time
port = int(sys.argv[1])
socks = []
try:
    for i in range(100):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        try:
            s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 3000)
        except BlockingIOError:
            pass
        socks.append(s)
    time.sleep(0.3)
    t1 = time.monotonic()
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                        "--max-time", "2", "http://127.0.0.1:%d/metrics" % port],
                       capture_output=True, text=True)
    took = time.monotonic() - t1
    if r.stdout != "200":
        sys.exit("scrape with 100 clients pipelining without reading: HTTP '%s' "
                 "after %.2f s (curl exit %d)" % (r.stdout, took, r.returncode))
    print("scrape served in %.3f s with 100 clients not reading" % took)
finally:
    for s in socks:
        s.close()
PY
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/metrics")
[ "$code" = 200 ] || fail "after the stalled clients left: HTTP $code"
kill -0 "$pid" 2>/dev/null || fail "agent died"
# evicting 300 connections does not flood the log (at most 10 lines a minute)
n=$(grep -c "firebreak agent: http:" "$tmp/err")
[ "$n" -le 12 ] || fail "$n http log lines for the stalled clients: $(head -3 "$tmp/err")"
[ $fails = 0 ] && echo "agent_stall: ok"
exit $fails
