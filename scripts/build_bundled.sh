#!/usr/bin/env bash
# Rebuild the bundled model in assets/ end to end on a CPU: base model, lossless and shared streams,
# then the benchmark that the model card quotes. Each stage prints progress; run it in the background:
#   nohup bash scripts/build_bundled.sh > build.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
PRETRAIN_MINUTES="${PRETRAIN_MINUTES:-75}"
STREAM_MINUTES="${STREAM_MINUTES:-15}"
start=$(date +%s)
# 1. tokenizer + base model from offline text and the task suite's train split
$PY -m specstream_core pretrain --out assets/base --minutes "$PRETRAIN_MINUTES" --threads 2
# 2. streams in both modes, one thread each, side by side
$PY -m specstream_core train --base assets/base --out assets/streams-lossless --mode lossless \
    --minutes "$STREAM_MINUTES" --steps 100000 --batch-size 4 --threads 1 --lr 3e-3 \
    --recommend-topk "${TOPK:-2,2,1,1}" --recommend-budget "${BUDGET:-16}" &
$PY -m specstream_core train --base assets/base --out assets/streams-shared --mode shared \
    --minutes "$STREAM_MINUTES" --steps 100000 --batch-size 4 --threads 1 --lr 2e-3 \
    --recommend-topk "${TOPK:-2,2,1,1}" --recommend-budget "${BUDGET:-16}" &
wait
rm -rf assets/base/checkpoint assets/streams-lossless/checkpoint assets/streams-shared/checkpoint
echo "build took $(( ($(date +%s) - start) / 60 )) minutes"
# 3. the model card's numbers
$PY -m specstream_core bench --methods ar,ss-lossless,ss-shared --baseline ar --n 20 \
    --json assets/bench.json --markdown assets/bench.md
