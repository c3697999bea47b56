#!/usr/bin/env bash
# Open files (docs/supervisor.md, "At scale"): a supervisor holds a pidfd
# and pipes per rank, past a soft limit of 64 at 200 ranks; it raises its
# own soft limit to the hard one, and every rank still starts with the
# soft limit it was given.
source "$(dirname "$0")/lib.sh"
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 1024 ]; then
    echo "skip: hard limit of open files $hard"
    exit 77
fi
cat >rank.sh <<'SH'
#!/bin/sh
ulimit -Sn >"$FIREBREAK_RUN_DIR/nofile.$RANK"
sleep 0.2
SH
chmod +x rank.sh
(
    ulimit -Sn 64
    "$FB" run --nproc-per-node 200 --max-restarts 0 --json -- sh "$T/rank.sh" "$TAG" \
        >out.json 2>err.txt
) || fail "run exited $? ($(tail -3 err.txt))"
[ "$(json_field out.json '["completed"]')" = True ] || fail "not completed: $(tail -1 out.json)"
d=$(run_dir)
n=$(ls "$d" | grep -c '^nofile\.' || true)
[ "$n" = 200 ] || fail "$n of 200 ranks ran"
bad=$(cat "$d"/nofile.* | grep -vc '^64$' || true)
[ "$bad" = 0 ] || fail "$bad ranks started with another soft limit: $(cat "$d"/nofile.* | sort | uniq -c)"
ok "200 ranks under a soft limit of 64, each started with 64"
