#!/bin/sh
# torch2_gate.sh READY_FILE COMMAND...: run COMMAND when the torch 2 venv is
# ready (scripts/deps.sh writes READY_FILE last), else skip (exit 77).
ready=$1
shift
if [ ! -e "$ready" ]; then
    echo "SKIP: $ready missing: the torch 2 venv is not installed (scripts/deps.sh)"
    exit 77
fi
exec "$@"
