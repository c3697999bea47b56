#!/usr/bin/env bash
# layering.sh ROOT -- check every `#include "<comp>/<header>"` under
# ROOT/src against the layering table in ROOT/docs/development.md
# ("Layering"): which components each component may include, and which of a
# component's headers the others may include.  The table is the rule; this
# script only reads it.  The build already refuses a folder a target does
# not link (per-target include roots); this checks the finer rules the
# compiler cannot see (what linking makes visible transitively, and headers
# private to their component).  Exit 0 clean, 1 a violation (each printed
# with both sides: what the file includes and what the table allows), 2 the
# table or the tree could not be read.
#
# layering.sh --self-test ROOT: on a scratch copy of ROOT's src/ and docs/,
# the clean tree must pass, and a tree with one forbidden include, or with
# one private header included from outside, must fail.
set -u

if [ "${1:-}" = --self-test ]; then
    root=${2:?usage: layering.sh --self-test ROOT}
    self=$(readlink -f "$0")
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    fail=0
    copy() { rm -rf "$tmp/t"; mkdir -p "$tmp/t"; cp -r "$root/src" "$root/docs" "$tmp/t/"; }
    copy
    bash "$self" "$tmp/t" >/dev/null || { echo "FAIL: clean tree rejected"; fail=1; }
    copy
    printf '#include "supervisor/supervisor.h"\n' >>"$tmp/t/src/report/load.c"
    rc=0; out=$(bash "$self" "$tmp/t") || rc=$?
    if [ $rc != 1 ] || ! grep -q 'src/report/load.c:.*supervisor/supervisor.h' <<<"$out"; then
        echo "FAIL: report including supervisor/ not reported (exit $rc): $out"; fail=1
    fi
    copy
    printf '#include "supervisor/sup.h"\n' >>"$tmp/t/src/cli/cmd_run.c"
    rc=0; out=$(bash "$self" "$tmp/t") || rc=$?
    if [ $rc != 1 ] || ! grep -q 'src/cli/cmd_run.c:.*supervisor/sup.h' <<<"$out"; then
        echo "FAIL: cli including supervisor/sup.h not reported (exit $rc): $out"; fail=1
    fi
    [ $fail = 0 ] && echo "layering self-test: ok"
    exit $fail
fi

root=${1:?usage: layering.sh ROOT}
doc=$root/docs/development.md
[ -r "$doc" ] || { echo "layering: cannot read $doc"; exit 2; }

# Rows of the table: | `comp` | `dep`, `dep` | `header.h`, ... |
# ("—" for none; "every header" for all of them).
declare -A may pub
while IFS='|' read -r _ c d h _; do
    c=$(tr -d '` ' <<<"$c")
    may[$c]=" $(sed 's/[`,]//g; s/—//g' <<<"$d" | xargs) "
    pub[$c]=" $(sed 's/[`,]//g; s/—//g' <<<"$h" | xargs) "
done < <(awk '/^## Layering/{on=1; next} /^## /{on=0} on && /^\| `[a-z]+` \|/' "$doc")
[ ${#may[@]} -gt 0 ] || { echo "layering: no table under '## Layering' in $doc"; exit 2; }

bad=0
for dir in "$root"/src/*/; do
    comp=$(basename "$dir")
    if [ -z "${may[$comp]+x}" ]; then
        echo "src/$comp/: not in the layering table of docs/development.md: add a row"
        bad=1
        continue
    fi
    for f in "$dir"*.c "$dir"*.h; do
        [ -e "$f" ] || continue
        while IFS=: read -r line inc; do
            dep=${inc%%/*}
            hdr=${inc#*/}
            [ "$dep" = firebreak ] && continue
            [ "$dep" = "$comp" ] && continue
            where="src/$comp/$(basename "$f"):$line"
            if [ -z "${may[$dep]+x}" ]; then
                echo "$where: includes \"$inc\": $dep is no component of the table"
                bad=1
                continue
            fi
            if [ "$dep" != common ] && [[ "${may[$comp]}" != *" $dep "* ]]; then
                allowed=$(xargs <<<"${may[$comp]}")
                echo "$where: $comp includes \"$inc\"; $comp may include: ${allowed:-none} besides its own folder and common/ (docs/development.md, Layering)"
                bad=1
                continue
            fi
            if [[ "${pub[$dep]}" != *" every header "* && "${pub[$dep]}" != *" $hdr "* ]]; then
                allowed=$(xargs <<<"${pub[$dep]}")
                echo "$where: $comp includes \"$inc\"; of $dep, others may include: ${allowed:-none} (docs/development.md, Layering)"
                bad=1
            fi
        done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_0-9]*/' "$f" |
                 sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/')
    done
done
[ $bad = 0 ] && echo "layering: src/ follows docs/development.md"
exit $bad
