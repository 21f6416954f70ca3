#!/usr/bin/env bash
# Rebuild the bundled model in assets/ end to end on a CPU: base model, lossless and shared streams,
# then the benchmark that the model card quotes. Each stage prints progress; run it in the background:
#   nohup bash scripts/build_bundled.sh > build.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
PRETRAIN_MINUTES="${PRETRAIN_MINUTES:-75}"
start=$(date +%s)
# 1. tokenizer + base model from offline text and the task suite's train split
# (the bundled base was made in two stages, see assets/base/README.md; this is the one-stage equivalent)
$PY -m specstream_core pretrain --out assets/base --minutes "$PRETRAIN_MINUTES" --threads 2
# 2. streams in both modes, one thread each, side by side
COMMON="--batch-size 4 --seq-len 192 --threads 1 --n-stream-layers 4
        --recommend-topk ${TOPK:-1,1,1,1} --recommend-prune ${PRUNE:-0} --recommend-budget ${BUDGET:-64}"
$PY -m specstream_core train --base assets/base --out assets/streams-lossless --mode lossless \
    --lr 4e-3 --adapter-rank 32 --steps 150 --examples-per-category 400 $COMMON &
$PY -m specstream_core train --base assets/base --out assets/streams-shared --mode shared \
    --lr 5e-3 --lora-rank 16 --steps 320 --examples-per-category 1500 $COMMON &
wait
rm -rf assets/base/checkpoint assets/streams-lossless/checkpoint assets/streams-shared/checkpoint
echo "build took $(( ($(date +%s) - start) / 60 )) minutes"
# 3. the model card's numbers
$PY -m specstream_core bench --methods ar,ss-lossless,ss-shared --baseline ar --n 20 --max-new-tokens 96 \
    --json assets/bench.json --markdown assets/bench.md
