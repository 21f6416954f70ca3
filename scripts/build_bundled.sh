#!/usr/bin/env bash
# Rebuild the first model (9.4M parameters, trained from scratch; no longer shipped or used by default:
# it left assets/ at commit d72bd7c) end to end on a CPU: base model, lossless and shared streams, then
# the benchmark its card quoted. Each stage prints progress; run it in the background:
#   nohup bash scripts/build_bundled.sh > build.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
PRETRAIN_MINUTES="${PRETRAIN_MINUTES:-75}"
PRETRAIN_THREADS="${PRETRAIN_THREADS:-2}"  # 1 when something else runs beside it (two threads then stall)
start=$(date +%s)
# 1. tokenizer + base model from offline text and the task suite's train split
# (the shipped base was made in two stages, see `git show d72bd7c:assets/base/README.md`; this is the one-stage equivalent)
$PY -m specstream_core pretrain --out assets/base --minutes "$PRETRAIN_MINUTES" --threads "$PRETRAIN_THREADS"
# 2. self-distillation targets: the base model's greedy answers to 500 train prompts per category
#    (shared by both stream trainings through the cache file; ~5 minutes)
DISTILL="--distill --distill-cache build/distill.jsonl --examples-per-category 500"
$PY -m specstream_core distill --base assets/base --out build/distill.jsonl --examples-per-category 500 --threads 1
# 3. streams in both modes, one thread each, side by side
COMMON="--batch-size 4 --seq-len 192 --threads 1 --n-stream-layers 4 $DISTILL
        --recommend-topk ${TOPK:-1,1,1,1} --recommend-prune ${PRUNE:-0} --recommend-budget ${BUDGET:-64}"
$PY -m specstream_core train --base assets/base --out assets/streams-lossless --mode lossless \
    --lr 3e-3 --adapter-rank 32 --steps 650 $COMMON &
$PY -m specstream_core train --base assets/base --out assets/streams-shared --mode shared \
    --lr 5e-3 --lora-rank 16 --steps 550 $COMMON &
wait
rm -rf assets/base/checkpoint assets/streams-lossless/checkpoint assets/streams-shared/checkpoint
echo "model build took $(( ($(date +%s) - start) / 60 )) minutes"
# 4. the model card's numbers (~5 min)
$PY -m specstream_core bench --methods ar,hf-greedy,ss,ss-shared --baseline ar --n 20 --max-new-tokens 96 \
    --threads 1 --ablations none --precisions fp32 --json assets/bench.json --markdown assets/bench.md
[ "${SKIP_BASELINES:-0}" = 1 ] && exit 0
# 5. benchmark extras (~25 min more; SKIP_BASELINES=1 stops above): the Ns ablation's second lossless
# stream set (Ns = 2, same recipe), a draft model with the base's tokenizer for transformers assisted
# generation, and Medusa-style heads on the same self-distilled targets, side by side
$PY -m specstream_core train --base assets/base --out assets/ablation/streams-lossless-ns2 --mode lossless \
    --lr 3e-3 --adapter-rank 32 --steps 650 $COMMON --n-stream-layers 2 &
$PY -m specstream_core pretrain --out assets/draft --tokenizer-from assets/base --layers 2 --hidden 128 \
    --minutes 11 --threads 1 &
$PY -m specstream_core train-medusa --base assets/base --out assets/medusa --examples-per-category 500 \
    --distill-cache build/distill.jsonl --steps 400 --minutes 9 --lr 3e-3 --threads 1 &
wait
rm -rf assets/ablation/streams-lossless-ns2/checkpoint assets/draft/checkpoint assets/medusa/checkpoint
# 6. a benchmark of the first model: all methods, fp32 + nf4, ablations (~8 min; copy a result file into
#    docs/bench/ and run `python -m specstream_core report` to put it on the benchmark page)
$PY -m specstream_core bench --threads 1 --json build/first-model/bench.json --markdown build/first-model/bench.md \
    --plots build/first-model/
