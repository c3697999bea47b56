#!/usr/bin/env bash
# CLI tests of `firebreak sim`: output formats, the Llama 3 calibration seen
# from the command line, determinism, sweeps and plots, --from-run, and
# every kind of bad input (exit 2 with a message naming the problem).
#   usage: cli_sim.sh FIREBREAK DATA_DIR
set -euo pipefail

fb=$1
data=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# json FILE EXPR: evaluate a Python expression over the parsed last line.
json() {
    python3 -c 'import json,sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(eval(sys.argv[2]))' "$1" "$2"
}

# check COND_EXPR FILE MESSAGE: a Python boolean over the JSON in FILE.
check() {
    if [ "$(json "$2" "$1")" != "True" ]; then
        fail "$3 ($1)"
    fi
}

# expect_usage_error NEEDLE ARGS...: exit 2 and NEEDLE on stderr.
expect_usage_error() {
    local needle=$1
    shift
    local rc=0
    timeout 60 "$fb" sim "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    if [ "$rc" -ne 2 ]; then
        fail "sim $* exited $rc, want 2"
    elif ! grep -qF -- "$needle" "$tmp/err"; then
        fail "sim $*: stderr lacks '$needle': $(cat "$tmp/err")"
    fi
}

quick=(--trials 200 --no-search)

# --help: usage on stdout, exit 0.
"$fb" sim --help >"$tmp/help"
grep -q '^usage: firebreak sim' "$tmp/help" || fail "--help has no usage"
grep -q -- '--ckpt-size-per-gpu' "$tmp/help" || fail "--help lacks options"

# --json: one object on one line, the only line of stdout.
"$fb" sim --trials 300 --json >"$tmp/llama3.json"
[ "$(wc -l <"$tmp/llama3.json")" -eq 1 ] || fail "--json printed more lines"
check 'd["version"] == 1' "$tmp/llama3.json" "version"
check 'all(k in d["ettr"] for k in ("mean", "p5", "p95"))' \
    "$tmp/llama3.json" "ettr keys"
check 'all(k in d["time_s"] for k in ("useful", "checkpoint", "lost", "detect", "restart"))' \
    "$tmp/llama3.json" "time_s keys"
check 'all(k in d["optimal_interval_s"] for k in ("search", "young", "daly"))' \
    "$tmp/llama3.json" "optimal_interval_s keys"
check 'abs(d["interruptions"]["mean"] - 419) <= 0.03 * 419' \
    "$tmp/llama3.json" "llama3 interruptions"
check 'abs(d["interruptions"]["by_category"]["gpu"] - 268) <= 0.03 * 268' \
    "$tmp/llama3.json" "llama3 gpu category"
check 'abs(d["interruptions"]["by_category"]["unknown"] - 7) <= 0.6' \
    "$tmp/llama3.json" "llama3 unknown category"
check 'abs(sum(d["time_s"][k] for k in ("useful", "checkpoint", "lost", "detect", "restart", "repair_wait", "maintenance")) - d["time_s"]["wall"]) < 1' \
    "$tmp/llama3.json" "time parts sum to wall"
check 'abs(d["time_s"]["useful"] / d["time_s"]["wall"] - d["ettr"]["mean"]) < 1e-9' \
    "$tmp/llama3.json" "ettr is useful / wall"
check '0 < d["optimal_interval_s"]["search"] < 3600' "$tmp/llama3.json" \
    "search interval"

# Text output names the parts.
"$fb" sim "${quick[@]}" >"$tmp/text"
for w in "effective training time" "lost work" "detection" "restart" gpu; do
    grep -q "$w" "$tmp/text" || fail "text output lacks '$w'"
done
# one node, one spare: singular (it said "1 nodes", "1 spare nodes")
"$fb" sim --gpus 8 --trials 10 --days 1 >"$tmp/one"
grep -q "8 GPUs (1 node), 1 day, 10 trials" "$tmp/one" || fail "one node: $(head -3 "$tmp/one")"
grep -q "1 spare node (1%)" "$tmp/one" || fail "one spare: $(head -3 "$tmp/one")"

# A rates file with the preset's rates gives the preset's answer.
"$fb" sim "${quick[@]}" --json >"$tmp/preset.json"
"$fb" sim "${quick[@]}" --json --rates "$data/llama3.rates" >"$tmp/file.json"
a=$(json "$tmp/preset.json" 'd["ettr"]["mean"]')
b=$(json "$tmp/file.json" 'd["ettr"]["mean"]')
python3 -c "import sys; sys.exit(abs($a - $b) > 1e-6)" ||
    fail "rates file $b != preset $a"

# Determinism: same seed same bits, any thread count; other seed differs.
"$fb" sim "${quick[@]}" --json --seed 7 --threads 1 >"$tmp/s1"
"$fb" sim "${quick[@]}" --json --seed 7 --threads 2 >"$tmp/s2"
"$fb" sim "${quick[@]}" --json --seed 8 --threads 2 >"$tmp/s3"
cmp -s "$tmp/s1" "$tmp/s2" || fail "threads change the result"
cmp -s "$tmp/s1" "$tmp/s3" && fail "the seed does not matter"

# Presets rsc1 / rsc2: failures per 1000 node-days.
"$fb" sim "${quick[@]}" --json --preset rsc1 --gpus 16384 --days 30 >"$tmp/r1"
check 'abs(d["interruptions"]["mean"] - 6.5 * 2048 * 30 / 1000) <= 0.03 * 6.5 * 2048 * 30 / 1000' \
    "$tmp/r1" "rsc1 rate"
"$fb" sim "${quick[@]}" --json --preset rsc2 --gpus 16384 --days 30 >"$tmp/r2"
check 'abs(d["interruptions"]["mean"] - 2.34 * 2048 * 30 / 1000) <= 0.04 * 2.34 * 2048 * 30 / 1000' \
    "$tmp/r2" "rsc2 rate"

# Exponential model checking against the first-order formula.
"$fb" sim --failure-model exponential --mtbf 8h --ckpt-interval 20m \
    --ckpt-stall 30s --restart 4m --detect 1m --days 30 --trials 300 \
    --json >"$tmp/exp"
check 'abs(d["ettr"]["mean"] - (1 - (300 + 600) / 28800) / (1 + 30 / 1200)) < 0.01' \
    "$tmp/exp" "exponential vs first-order model"
check 'list(d["interruptions"]["by_category"]) == ["failure"]' "$tmp/exp" \
    "exponential has one process"
check 'd["time_s"]["maintenance"] == 0 and d["time_s"]["repair_wait"] == 0' \
    "$tmp/exp" "exponential switches off maintenance and repairs"
check 'abs(d["optimal_interval_s"]["search"] / d["optimal_interval_s"]["daly"] - 1) < 0.1' \
    "$tmp/exp" "search near Daly"

# Physical honesty: the floor is reported, an impossible interval refused.
"$fb" sim --trials 100 --json --ckpt-size-per-gpu 64G \
    --storage-bandwidth 1T/s --ckpt-interval 2h >"$tmp/floor"
check 'd["policy"]["persist_s"] == 64 * 16384 / 1024' "$tmp/floor" \
    "persist time from size and bandwidth"
check 'd["optimal_interval_s"]["search"] >= d["policy"]["persist_s"]' \
    "$tmp/floor" "search below the persist floor"
check 'd["optimal_interval_s"]["daly_below_floor"] is True' "$tmp/floor" \
    "daly below floor not flagged"
"$fb" sim --trials 100 --ckpt-size-per-gpu 64G --storage-bandwidth 1T/s \
    --ckpt-interval 2h >"$tmp/floor.txt"
grep -q "impossible: below persist time" "$tmp/floor.txt" ||
    fail "text does not say the formula is impossible"
expect_usage_error "persist" --ckpt-interval 10m --ckpt-size-per-gpu 64G \
    --storage-bandwidth 1T/s

# Sweep: text, JSON, CSV and the SVG plot.
"$fb" sim --trials 100 --sweep gpus=1024:131072 --svg "$tmp/plot.svg" \
    --json >"$tmp/sweep"
check 'len(d["points"]) == 8 and d["points"][-1]["gpus"] == 131072' \
    "$tmp/sweep" "sweep points"
check 'all(p["feasible"] for p in d["points"])' "$tmp/sweep" "feasible"
check 'd["points"][0]["ettr"]["mean"] > d["points"][-1]["ettr"]["mean"] + 0.2' \
    "$tmp/sweep" "ETTR falls with scale"
check 'all(p["ettr_at_best"] >= p["ettr"]["mean"] - 0.005 for p in d["points"])' \
    "$tmp/sweep" "daly interval no worse than the default"
grep -q '<svg' "$tmp/plot.svg" && grep -q '</svg>' "$tmp/plot.svg" ||
    fail "no SVG written"
grep -q '<polyline' "$tmp/plot.svg" || fail "SVG has no curve"
# The title names the rates file: markup and a byte that is not UTF-8 in
# its name leave the SVG well-formed XML (the byte was written as it came).
odd="$tmp/r<&$(printf '\xff').rates"
cp "$data/llama3.rates" "$odd"
"$fb" sim --trials 20 --rates "$odd" --sweep gpus=1024,4096 --svg "$tmp/odd.svg" \
    >/dev/null || fail "sweep with an odd rates file name"
python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' "$tmp/odd.svg" ||
    fail "SVG not well-formed with an odd rates file name"
grep -q 'rates .*r&lt;&amp;&#xFFFD;\.rates' "$tmp/odd.svg" || fail "SVG title: $(grep -o 'rates [^,]*' "$tmp/odd.svg")"
"$fb" sim --trials 50 --sweep gpus=1024,16384 >"$tmp/sweep.txt"
grep -q '^ *16384 ' "$tmp/sweep.txt" || fail "sweep text lacks 16384 row"
"$fb" sim --trials 50 --sweep gpus=1024:131072 --ckpt-size-per-gpu 64G \
    --storage-bandwidth 1T/s --ckpt-interval 30m --json >"$tmp/sweep2"
check 'd["points"][-1]["feasible"] is False and "persist" in d["points"][-1]["why"]' \
    "$tmp/sweep2" "impossible sweep point not flagged"
check 'd["points"][0]["feasible"] is True' "$tmp/sweep2" "small point"

# CSV: per trial.
"$fb" sim --trials 25 --no-search --csv >"$tmp/csv"
[ "$(wc -l <"$tmp/csv")" -eq 26 ] || fail "csv rows: $(wc -l <"$tmp/csv")"
head -1 "$tmp/csv" | grep -q '^trial,ettr,interruptions' || fail "csv header"
"$fb" sim --trials 25 --no-search --csv --json >"$tmp/csvjson"
tail -n 1 "$tmp/csvjson" | grep -q '^{"version"' || fail "json not last"

# --from-run: costs measured by a real run's journal.
mkdir -p "$tmp/run"
sqlite3 "$tmp/run/journal.sqlite" <"$src/src/journal/schema.sql"
sqlite3 "$tmp/run/journal.sqlite" <"$data/journal.sql"
"$fb" sim --from-run "$tmp/run" --gpus 16384 --trials 100 --json >"$tmp/fr"
check 'abs(d["policy"]["stall_s"] - 2) < 1e-9' "$tmp/fr" "measured stall"
check 'abs(d["policy"]["persist_s"] - 6) < 1e-9' "$tmp/fr" "measured persist"
check 'abs(d["policy"]["interval_s"] - 117.75) < 1e-6' "$tmp/fr" \
    "measured interval"
check 'abs(d["policy"]["detect_crash_s"] - 0.5) < 1e-9' "$tmp/fr" \
    "measured crash detection"
check 'abs(d["policy"]["detect_hang_s"] - 30) < 1e-9' "$tmp/fr" \
    "measured hang detection"
check 'abs(d["policy"]["restart_s"] - 55) < 1e-9' "$tmp/fr" \
    "measured restart"
check '"measured" in d["source"] and d["gpus"] == 16384' "$tmp/fr" "source"
"$fb" sim --from-run "$tmp/run" --restart 10m --trials 50 --no-search \
    --json >"$tmp/fr2"
check 'd["policy"]["restart_s"] == 600' "$tmp/fr2" "option beats measurement"
# not a run: where the runs are, as `firebreak report` says it
expect_usage_error "no journal.sqlite here, but it holds 1 run directory (the newest $tmp/run): give one" --from-run "$tmp"
mkdir -p "$tmp/run/logs"
expect_usage_error "no journal.sqlite here: it is inside the run directory $(realpath "$tmp/run"): give that one" --from-run "$tmp/run/logs"
expect_usage_error "--from-run $tmp/nope: No such file or directory" --from-run "$tmp/nope"
# An empty --from-run named /journal.sqlite; reading never creates a file.
expect_usage_error "--from-run needs a value, not an empty string" --from-run ""
expect_usage_error "--from-run needs a value, not an empty string" --from-run=
expect_usage_error "--rates needs a value, not an empty string" --rates ""
[ ! -e "$tmp/nope" ] || fail "--from-run $tmp/nope created it"
mkdir "$tmp/nojournal"
expect_usage_error "no journal.sqlite in this directory" --from-run "$tmp/nojournal"
[ -z "$(ls -A "$tmp/nojournal")" ] ||
    fail "--from-run of a directory without a journal created $(ls -A "$tmp/nojournal")"
# Without event.source values (a run before 1.1) the tiers' restore costs keep their
# defaults and the toy run's size draws a warning on stderr.
"$fb" sim --from-run "$tmp/run" --tiers --peer-copy 10s --trials 20 \
    --no-search --json >"$tmp/fr3" 2>"$tmp/fr3.err"
check 'd["policy"]["tiers"]["restore_s"]["memory"] == 2 * 2**30 / 1.34e9' \
    "$tmp/fr3" "no restore measured: the default memory restore"
grep -q "warning: --from-run extrapolates from a toy-sized run: 4 ranks" \
    "$tmp/fr3.err" || fail "no toy-run warning: $(cat "$tmp/fr3.err")"
grep -Eq "4 ranks with [0-9.]+ [KMG]?i?B of checkpoint each, projected to 16384 GPUs with 2 GiB each \(x[0-9.e+]+ bytes, x4.1e\+03 ranks\)" \
    "$tmp/fr3.err" || fail "toy-run warning with a size: $(cat "$tmp/fr3.err")"
# A run with no checkpoint and no restore: the size is said to be unknown
# (it was printed as "-1 B", "x0 bytes").
cp -r "$tmp/run" "$tmp/run0"
sqlite3 "$tmp/run0/journal.sqlite" "delete from checkpoint; delete from event where kind like 'restore%';"
"$fb" sim --from-run "$tmp/run0" --trials 20 --no-search --json >/dev/null 2>"$tmp/fr0.err"
grep -q "4 ranks whose checkpoint size it did not measure, projected to 16384 GPUs with 2 GiB each (x4.1e+03 ranks)" \
    "$tmp/fr0.err" || fail "toy-run warning without a size: $(cat "$tmp/fr0.err")"
check 'len(d["assumptions"]["warnings"]) == 1' "$tmp/fr3" "warning in json"
# With it (a later minor), each tier's rate per rank, scaled to 2 GiB a
# GPU; storage no faster than 2 GiB x 16,384 GPUs at 2 TiB/s; the restore
# taken out of the measured restart.
mkdir -p "$tmp/run11"
sqlite3 "$tmp/run11/journal.sqlite" <"$src/src/journal/schema.sql"
sqlite3 "$tmp/run11/journal.sqlite" <"$data/journal.sql"
sqlite3 "$tmp/run11/journal.sqlite" <"$data/journal_tiers.sql"
"$fb" sim --from-run "$tmp/run11" --tiers --peer-copy 10s --trials 20 \
    --no-search --json >"$tmp/fr4" 2>/dev/null
check 'd["policy"]["tiers"]["restore_s"] == {"memory": 20.48, "peer": 102.4, "storage": 1024}' \
    "$tmp/fr4" "measured restores by tier, scaled by bytes"
check 'd["policy"]["restart_s"] == 53' "$tmp/fr4" "restart without restore"
"$fb" sim --from-run "$tmp/run11" --tiers --peer-copy 10s --trials 20 \
    --ckpt-size-per-gpu 1M --storage-bandwidth 1M/s --persist-every 200 \
    --no-search --json \
    >"$tmp/fr5" 2>/dev/null
check 'd["policy"]["tiers"]["restore_s"]["storage"] == 16384' "$tmp/fr5" \
    "storage restore bounded by every GPU's bytes at the storage bandwidth"

# A journal value that is not a number, not finite, negative or absurd is
# refused (exit 2), naming the file, table.column and row: inf gave errors
# blaming options never given (--ckpt-stall), 1e300 printed durations like
# -106751991167300d-15h, TEXT read as 0, negatives were dropped in silence,
# and restore rates came out as "inf PiB/s" or the restart as 0 ms.
bad_journal() { # NEEDLE SQL
    rm -rf "$tmp/badrun"
    cp -r "$tmp/run11" "$tmp/badrun"
    sqlite3 "$tmp/badrun/journal.sqlite" "$2"
    expect_usage_error "$tmp/badrun/journal.sqlite: $1" \
        --from-run "$tmp/badrun" --tiers --peer-copy 10s "${quick[@]}"
}
bad_journal "checkpoint.stall_ms of row 1 is inf: want milliseconds" \
    "update checkpoint set stall_ms = 9e999 where id = 1"
bad_journal "checkpoint.stall_ms of row 2 is 1e+300: want milliseconds" \
    "update checkpoint set stall_ms = 1e300 where id = 2"
bad_journal "checkpoint.stall_ms of row 1 is not a number" \
    "update checkpoint set stall_ms = 'abc' where id = 1"
bad_journal "checkpoint.persist_ms of row 3 is -5: want milliseconds" \
    "update checkpoint set persist_ms = -5 where id = 3"
bad_journal "incident.detect_ms of row 2 is inf" \
    "update incident set detect_ms = 9e999 where id = 2"
bad_journal "attempt.ready_at of row 2 is 1e+300" \
    "update attempt set ready_at = 1e300 where id = 2"
bad_journal "attempt.restore_s of row 3 is -5: want seconds" \
    "update attempt set restore_s = -5 where id = 3"
bad_journal "attempt.restore_s of row 2 is inf" \
    "update attempt set restore_s = 9e999 where id = 2"
bad_journal "run.nproc of row 1 is not a number that fits it" \
    "update run set nproc = 4294967300"
bad_journal "event.bytes of row 1 is 9e+18: want bytes" \
    "update event set bytes = 9000000000000000000 where id = 1"
bad_journal "event row 2 restores 1048576 bytes in 1e-300 ms: faster than 1 PiB/s" \
    "update event set value_ms = 1e-300 where id = 2"
bad_journal "the mean restore (attempt.restore_s, 100 s) is longer than the mean restart it is part of (55 s)" \
    "update attempt set restore_s = 100 where id > 1"

# Large journals read in about linear time (each incident searched its
# attempt in a list, each attempt its predecessor among all: 160,000
# attempts ran for minutes), and each attempt has one predecessor at most:
# 50,000 attempts numbered 0 and 50,000 numbered 1 counted every pair, and
# printed "-1794967296 restarts".
big_journal() { # DIR SQL
    mkdir -p "$1"
    sqlite3 "$1/journal.sqlite" <"$src/src/journal/schema.sql"
    sqlite3 "$1/journal.sqlite" "INSERT INTO meta VALUES ('schema_version', '1.0'), ('writer', 'test');
INSERT INTO run (id, name, job_id, run_dir, command, launcher, nproc, nnodes,
                 hostname, max_restarts, hang_timeout_s, started_at)
  VALUES (1, 't', 'j', '.', '[\"train\"]', 'local', 4, 1, 'h', 3, 30, 1000);
CREATE TEMP TABLE n AS WITH RECURSIVE c(i) AS
  (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < $2) SELECT i FROM c;
$3"
}
big_journal "$tmp/big" 160000 "INSERT INTO attempt (id, run_id, number, started_at, ready_at, ended_at)
  SELECT i, 1, i - 1, 1000 + 10 * i, 1002 + 10 * i, 1009 + 10 * i FROM n;
INSERT INTO incident (run_id, attempt_id, kind, occurred_at, detected_at, detect_ms, detail)
  SELECT 1, i, 'crash', 1008 + 10 * i, 1008.5 + 10 * i, 500, 'x' FROM n;"
timeout 60 "$fb" sim --from-run "$tmp/big" "${quick[@]}" --trials 5 --json \
    >"$tmp/big.json" 2>/dev/null || fail "a 160,000-attempt journal: exit $?"
check '"159999 restarts" in d["source"] and d["policy"]["restart_s"] == 3.5' \
    "$tmp/big.json" "160,000 attempts, a restart of 3.5 s each"
big_journal "$tmp/dup" 100000 "INSERT INTO attempt (id, run_id, number, started_at, ready_at, ended_at)
  SELECT i, 1, i > 50000, 1000, 1010, CASE WHEN i > 50000 THEN 1090 ELSE 1005 END FROM n;"
timeout 60 "$fb" sim --from-run "$tmp/dup" "${quick[@]}" --trials 5 --json \
    >"$tmp/dup.json" 2>/dev/null || fail "duplicate attempt numbers: exit $?"
check '"50000 restarts" in d["source"] and d["policy"]["restart_s"] == 5' \
    "$tmp/dup.json" "one predecessor per attempt"

# Tiers: options, floors and refusals.
"$fb" sim --trials 50 --no-search --peer-copy 5s --persist-every 4 \
    --ckpt-interval 60s --json >"$tmp/tiers"
check 'd["policy"]["tiers"]["storage_interval_s"] == 240 and d["restores"]["memory"] > 0' \
    "$tmp/tiers" "tiers in json"
"$fb" sim --trials 50 --no-search --peer-copy 5s >"$tmp/tiers.txt"
grep -q "^restores (mean per trial): memory" "$tmp/tiers.txt" ||
    fail "text output lacks the restores by tier"
expect_usage_error "need the peer copy's time" --persist-every 4
expect_usage_error "no peer copy would ever complete" --peer-copy 20m
expect_usage_error "no checkpoint would ever reach storage" \
    --peer-copy 5s --ckpt-interval 10s --gpus 131072
expect_usage_error "--peers 3 needs at least 4 nodes" --peer-copy 1s \
    --peers 3 --gpus 16
expect_usage_error "checkpoint tiers need --failure-model categories" \
    --peer-copy 1s --failure-model exponential --mtbf 1h
expect_usage_error "--double-failure must be in [0, 1]" --peer-copy 1s \
    --double-failure 2

# Bad input: exit 2 and a message naming the problem.
expect_usage_error "line 3: negative rate" --rates "$data/negative.rates"
expect_usage_error "line 3: bad rate" --rates "$data/badline.rates"
expect_usage_error "cannot read" --rates "$tmp/nonexistent.rates"
# A rates file with a terminal escape in a name: the error quotes it with
# the control byte as '?', never raw.
printf 'failure \033[2Jgpu 1/job-day\n' >"$tmp/escape.rates"
expect_usage_error "bad category name '?[2Jgpu'" --rates "$tmp/escape.rates"
if grep -q "$(printf '\033')" "$tmp/err"; then
    fail "sim --rates: a raw ESC from the rates file reached stderr"
fi
# FIFOs where files should be are refused at once (timeout 60: not blocked)
mkfifo "$tmp/rates.fifo"
expect_usage_error "$tmp/rates.fifo: cannot read: not a regular file" \
    --rates "$tmp/rates.fifo"
mkdir "$tmp/fiforun" && mkfifo "$tmp/fiforun/journal.sqlite"
expect_usage_error "$tmp/fiforun/journal.sqlite: not a regular file" \
    --from-run "$tmp/fiforun"
expect_usage_error "--ckpt-interval must be greater than zero" \
    --ckpt-interval 0
expect_usage_error "unknown --preset 'nope'" --preset nope
expect_usage_error "bad value '-5h' for --mtbf" --failure-model exponential \
    --mtbf -5h
expect_usage_error "needs --mtbf" --failure-model exponential
expect_usage_error "unknown --failure-model" --failure-model weibull
expect_usage_error "--spares has no effect" --failure-model exponential \
    --mtbf 5h --spares 3
# The exponential model has no persist: these were validated and reported
# (persist_s 600 in the JSON) but did nothing.
expect_usage_error "--persist has no effect" --failure-model exponential \
    --mtbf 5h --persist 10m
expect_usage_error "--ckpt-size-per-gpu has no effect" \
    --failure-model exponential --mtbf 5h --ckpt-size-per-gpu 8G
expect_usage_error "--storage-bandwidth has no effect" \
    --failure-model exponential --mtbf 5h --storage-bandwidth 1G/s
"$fb" sim --failure-model exponential --mtbf 5h --from-run "$tmp/run" \
    "${quick[@]}" --json >"$tmp/expfr" 2>/dev/null ||
    fail "exponential --from-run refused"
check 'd["policy"]["persist_s"] == 0 and d["policy"]["stall_s"] == 2' \
    "$tmp/expfr" "exponential --from-run: the measured stall, no persist"
expect_usage_error "--gpus must be" --gpus 0
expect_usage_error "bad value 'x' for --trials" --trials x
expect_usage_error "--trials must be" --trials 0
expect_usage_error "unknown option '--frobnicate'" --frobnicate
expect_usage_error "--days needs a value" --days
expect_usage_error "bad --sweep" --sweep cores=1:2
# every count is digits: a trailing comma, an empty field, a sign or a
# space were taken by strtol (gpus=8, ran one point)
for bad in gpus=8, gpus=8,,16 gpus=,8 "gpus= 8,16" gpus=+8:16 gpus=8:+16 gpus=8: gpus=:8; do
    expect_usage_error "bad --sweep" --sweep "$bad"
done
expect_usage_error "--svg plots a sweep" --svg "$tmp/x.svg"
# No failures: no Young or Daly interval, "none" as the JSON's null (the
# text said "inf").
printf 'failure none 0/gpu-day\n' >"$tmp/zero.rates"
"$fb" sim --rates "$tmp/zero.rates" --trials 20 >"$tmp/zero.txt"
grep -Eq "^  young +none$" "$tmp/zero.txt" && grep -Eq "^  daly +none$" "$tmp/zero.txt" ||
    fail "zero rates: $(grep -E 'young|daly' "$tmp/zero.txt")"
# Rates too high to be finite name their option or line ("inf failures per
# trial expected", or a category "negative or not finite" with no line).
printf 'failure a 1/1e-300/1e-300/gpu-day\n' >"$tmp/tiny.rates"
expect_usage_error "--rates $tmp/tiny.rates: line 1: rate '1/1e-300/1e-300/gpu-day' is more than one a second" \
    --rates "$tmp/tiny.rates"
printf '# huge\nfailure a 1e308/gpu-second\n' >"$tmp/huge.rates"
expect_usage_error "--rates $tmp/huge.rates: line 2: rate '1e308/gpu-second' is more than one a second" \
    --rates "$tmp/huge.rates"
expect_usage_error "--planned-per-day must be between 0 and 86400" \
    --planned-per-day 1e308
printf 'failure a 100/gpu-hour\n' >"$tmp/many.rates"
expect_usage_error "too many to simulate (at most 1e7); lower the rates (--preset, --rates, --mtbf, --planned-per-day), --gpus or --days" \
    --rates "$tmp/many.rates"

# Work that would run for hours is refused, naming what to lower (100,000
# GPUs for 100 years ran 321 s with nothing said; a million trials of it
# about 20 hours).
expect_usage_error "about 1.77e+12 failures and planned stops to simulate in all (--trials 1000000, and the interval search): more than 1e+11, hours of work; lower --trials, --days or --gpus, or add --no-search" \
    --gpus 100000 --days 36500 --trials 1000000
expect_usage_error "(--trials 1000 at every --sweep point, twice): more than 1e+11" \
    --sweep gpus=1024:100000000 --days 36500

# Progress on a terminal's stderr (script(1) gives it one): a line redrawn
# after the first second, with a rate and what is left, cleared before the
# report; none on stdout, none for a short run.  A run that ended within
# 1.5 s (a fast machine) may rightly have drawn none.
if command -v script >/dev/null; then
    t0=$(date +%s%N)
    script -qec "'$fb' sim --gpus 100000 --days 3650 --trials 300 --no-search >'$tmp/prog.out'" \
        "$tmp/prog.tty" >/dev/null
    t1=$(date +%s%N)
    if [ $(((t1 - t0) / 1000000)) -gt 1500 ]; then
        grep -aEq $'\r\033\\[Kfirebreak sim: [0-9]+% of about [0-9.e+]+ events, [0-9.e+]+ events/s, about [^ ]+ left' \
            "$tmp/prog.tty" || fail "no progress line: $(cat -v "$tmp/prog.tty")"
        grep -aq $'left\r\033\\[K' "$tmp/prog.tty" || fail "progress line not cleared"
    fi
    grep -q "events/s" "$tmp/prog.out" && fail "progress on stdout"
    grep -q "^effective training time" "$tmp/prog.out" || fail "no report after progress"
    script -qec "'$fb' sim --trials 50 --no-search >/dev/null" "$tmp/quick.tty" >/dev/null
    grep -aq "events/s" "$tmp/quick.tty" && fail "progress drawn for a short run"
fi

# Durations past 100 years are refused naming the option (they ran, and
# printed -106751991167300d-15h).
expect_usage_error "--restart must be between 0 and 100 years" --restart 1e20
expect_usage_error "--repair and --drain-repair must be between 0 and 100 years" \
    --repair 1e308
expect_usage_error "--detect-crash (or --detect) must be between 0 and 100 years" \
    --detect 1e19
expect_usage_error "--detect-hang (or --detect) must be between 0 and 100 years" \
    --detect-hang 1e19
expect_usage_error "--ckpt-interval must be at most 100 years" \
    --ckpt-interval 1e19
expect_usage_error "--ckpt-stall must be between 0 and 100 years" \
    --ckpt-stall 1e308
expect_usage_error "--maint-duration must be between 0 and 100 years" \
    --maint-duration 1e12
expect_usage_error "--restore-peer must be between 0 and 100 years" \
    --peer-copy 5s --restore-peer 1e12
expect_usage_error "--mtbf must be at most 100 years" \
    --failure-model exponential --mtbf 1e300
"$fb" sim --restart 36500d --days 1 "${quick[@]}" >"$tmp/long.txt" ||
    fail "--restart 36500d refused"
grep -q "restart 36500d" "$tmp/long.txt" ||
    fail "100 years printed as $(grep -o 'restart [^,]*' "$tmp/long.txt")"
expect_usage_error "--lemon-fraction" --lemon-fraction 2
expect_usage_error "not both" --preset rsc1 --rates "$data/llama3.rates"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed" >&2
    exit 1
fi
echo "ok: firebreak sim CLI"
