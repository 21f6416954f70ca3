#!/usr/bin/env bash
# The prepared GPU check: speculative streaming on CUDA at nf4, bf16, fp16 and fp32 against plain decoding
# (how often outputs differ, where, the logit margin there), the speedup over transformers' greedy generate,
# τ, the lab's race on cuda and the ZeroGPU path (scripts/gpu_check.py says what each measures). Under 8
# minutes on one H100 from a fresh checkout; no network.
#
#   bash scripts/gpu_check.sh                      # on the GPU machine: results in gpu_check.json
#   bash scripts/gpu_check.sh --device cpu --quick # the script itself, on any machine (tests run this)
#
# The GPU machine has torch (CUDA), transformers, accelerate and peft but no bitsandbytes. Carry its wheel in
# gpu_wheels/ (git ignores it), made on a machine with a network by:
#   pip download --only-binary=:all: --no-deps --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       --platform manylinux_2_24_x86_64 -d gpu_wheels bitsandbytes==0.50.2
# It is installed into .gpu_site/ (not the machine's Python); without it nf4 is skipped with a line saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
SITE="$PWD/.gpu_site"
if [ -d gpu_wheels ] && ls gpu_wheels/*.whl >/dev/null 2>&1 && ! "$PY" -c "import bitsandbytes" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target "$SITE" gpu_wheels/*.whl \
    || echo "gpu_check: could not install gpu_wheels/ (nf4 will be skipped)"
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
exec timeout 470 "$PY" scripts/gpu_check.py "$@"
