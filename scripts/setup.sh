#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment with the pinned requirements.
# torch==2.13.0 is pinned so pip takes the local CPU wheel (a bare "torch" pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q -r "${1:-requirements.txt}"
