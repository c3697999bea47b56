#!/usr/bin/env bash
# Run a Python test with the PyPI torch 2.x venv that scripts/deps.sh
# installs (FB_TORCH2_VENV, default /opt/firebreak/torch-2.15.0); skip
# (77) when it is absent or not finished installing.
# Args: SCRIPT [ARGS...]
venv=${FB_TORCH2_VENV:-/opt/firebreak/torch-2.15.0}
if [ ! -f "$venv/.firebreak-ready" ] || [ ! -x "$venv/bin/python" ]; then
    echo "SKIP: no torch 2.x venv at $venv (scripts/deps.sh installs it)"
    exit 77
fi
exec "$venv/bin/python" "$@"
