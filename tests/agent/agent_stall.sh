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

# Three kinds of stalling client, each opening its sockets, then
# scraping while they are all still open (curl, at most 2 s), then closing
# everything: 300 partial requests; 100 requests whose body never ends;
# 100 clients that pipeline requests and never read the answers (each
# connection busy, its answer unsent: they held every slot, and a scrape
# got an empty reply until libmicrohttpd's 3 s timeout; now the one busy
# the longest gives way to a new connection).  Bounded: 5 s to open the
# sockets, 2 s for each scrape.
timeout 40 python3 - "$port" <<'PY' || fail "a scrape was not served while stalling clients held connections"
import socket, subprocess, sys, time
port = int(sys.argv[1])


def partial(s):
    s.sendall(b"GET /met")


def endless_body(s):
    s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: 100000\r\n\r\nabc")


def not_reading(s):
    s.setblocking(False)
    try:
        s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 3000)
    except BlockingIOError:
        pass


def scrape_while(n, client, what, rcvbuf=0):
    socks, t0 = [], time.monotonic()
    try:
        for i in range(n):
            if time.monotonic() - t0 > 5:
                sys.exit("opening %d connections took over 5 s (%d open)" % (n, i))
            s = socket.socket()
            if rcvbuf:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.settimeout(2)
            s.connect(("127.0.0.1", port))
            client(s)
            socks.append(s)
        time.sleep(0.3)  # the agent has accepted them
        t1 = time.monotonic()
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                            "--max-time", "2", "http://127.0.0.1:%d/metrics" % port],
                           capture_output=True, text=True)
        took = time.monotonic() - t1
        if r.stdout != "200":
            sys.exit("scrape with %s: HTTP '%s' after %.2f s (curl exit %d)"
                     % (what, r.stdout, took, r.returncode))
        print("scrape served in %.3f s with %s" % (took, what))
    finally:
        for s in socks:
            s.close()


scrape_while(300, partial, "300 stalled connections")
scrape_while(100, endless_body, "100 unfinished bodies")
scrape_while(100, not_reading, "100 clients pipelining without reading", rcvbuf=4096)
PY
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/metrics")
[ "$code" = 200 ] || fail "after the stalled clients left: HTTP $code"
kill -0 "$pid" 2>/dev/null || fail "agent died"
# evicting 300 connections does not flood the log (at most 10 lines a minute)
n=$(grep -c "firebreak agent: http:" "$tmp/err")
[ "$n" -le 12 ] || fail "$n http log lines for the stalled clients: $(head -3 "$tmp/err")"
[ $fails = 0 ] && echo "agent_stall: ok"
exit $fails
