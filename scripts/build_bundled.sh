#!/usr/bin/env bash
# Rebuild the bundled model in assets/ end to end on a CPU: base model, lossless and shared streams,
# then the benchmark that the model card quotes. Each stage prints progress; run it in the background:
#   nohup bash scripts/build_bundled.sh > build.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
PRETRAIN_MINUTES="${PRETRAIN_MINUTES:-75}"
STREAM_STEPS="${STREAM_STEPS:-340}"   # ~13 minutes at one thread each on this 2-core CPU
start=$(date +%s)
# 1. tokenizer + base model from offline text and the task suite's train split
$PY -m specstream_core pretrain --out assets/base --minutes "$PRETRAIN_MINUTES" --threads 2
# 2. streams in both modes, one thread each, side by side
COMMON="--steps $STREAM_STEPS --batch-size 4 --seq-len 192 --threads 1 --n-stream-layers 4 --examples-per-category 1500
        --recommend-topk ${TOPK:-3,2,2,1} --recommend-prune ${PRUNE:-0.1} --recommend-budget ${BUDGET:-24}"
$PY -m specstream_core train --base assets/base --out assets/streams-lossless --mode lossless \
    --lr 1e-2 --adapter-rank 32 $COMMON &
$PY -m specstream_core train --base assets/base --out assets/streams-shared --mode shared \
    --lr 5e-3 --lora-rank 16 $COMMON &
wait
rm -rf assets/base/checkpoint assets/streams-lossless/checkpoint assets/streams-shared/checkpoint
echo "build took $(( ($(date +%s) - start) / 60 )) minutes"
# 3. the model card's numbers
$PY -m specstream_core bench --methods ar,ss-lossless,ss-shared --baseline ar --n 20 \
    --json assets/bench.json --markdown assets/bench.md
