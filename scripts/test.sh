#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh requirements-dev.txt
command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRANSFORMERS_VERBOSITY=error
.venv/bin/ruff check .  # lint settings: pyproject.toml [tool.ruff]
# one worker per core, at most 4 (each test runs one torch thread; a test file stays on one worker, so its
# fixtures are built once). SPECSTREAM_TEST_WORKERS=0 runs everything in this process.
workers=${SPECSTREAM_TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
exec .venv/bin/python -m pytest -q -n "$workers" --dist loadfile tests "$@"
