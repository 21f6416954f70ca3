#!/usr/bin/env bash
# Set up (if needed) and launch the lab on the bundled model at http://127.0.0.1:7860
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh requirements.txt
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
exec .venv/bin/python app.py "$@"
