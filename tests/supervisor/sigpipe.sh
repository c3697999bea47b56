#!/usr/bin/env bash
# A reader of the supervisor's output that goes away (`| head`, a closed
# terminal, a tee that died) does not end the run: the supervisor ignores
# SIGPIPE, the run completes and is recorded so; its ranks still have
# SIGPIPE at its default (they are not changed by it).
source "$(dirname "$0")/lib.sh"
# Each rank: its ignored-signal mask, then console lines for a while.
cat >rank.sh <<'SH'
grep SigIgn /proc/self/status > "sigign.$FIREBREAK_RANK"
for i in $(seq 1 40); do echo "line $i of rank $FIREBREAK_RANK"; sleep 0.05; done
SH
set +e
"$FB" run --run-dir "$T/runs/r" --nproc-per-node 2 --console-ranks all -- bash rank.sh "$TAG" \
    2>&1 | head -c 1 >/dev/null
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || fail "firebreak run exited $rc with its reader gone (141: SIGPIPE)"
[ "$(q "select status from run")" = completed ] ||
    fail "the run is recorded $(q "select status from run")"
for r in 0 1; do
    m=$(awk '{print $2}' "sigign.$r")
    # SIGPIPE is signal 13: bit 12 of the mask.
    [ $(( 0x$m >> 12 & 1 )) = 0 ] || fail "rank $r started with SIGPIPE ignored (SigIgn $m)"
done
ok "reader gone: the run completed (exit 0), ranks keep SIGPIPE's default"
