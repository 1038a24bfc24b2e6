#!/usr/bin/env bash
# The real-model path a user runs, end to end, on a randomly initialised Qwen2.5-VL-3B (no download):
#   random checkpoint -> data synth -> data build (4 kinds) -> train --dry-run -> accelerate launch of the
#   sft / prm / dpo / reward recipes (ZeRO-2 and ZeRO-3 when DeepSpeed is installed) -> stepcritic eval with
#   the hf: / prm: / reward: judges on held-out chains.
# Every stage's wall time, peak host memory (GNU time) and peak GPU memory (logged by `stepcritic.train`) go to
# OUT/summary.md; each stage's output is in OUT/logs/.
#
#   scripts/real_path_e2e.sh tiny OUT   # CPU: tiny random Qwen2.5-VL, fp32, minutes
#   scripts/real_path_e2e.sh real OUT   # GPU: the 3.75B shape, bf16, the recipes' own precision
#
# Environment knobs: PYTHON (default python), STEPS (optimiser steps per run, default 3), N_TRAIN / N_EVAL
# (synthetic chains for training / held-out evaluation), NPROC (processes per launch; default: the GPU count,
# 1 on CPU), EVAL_LIMIT (held-out chains each judge sees), ZERO (stages to run, default "2 3").
set -euo pipefail

SIZE=${1:?usage: $0 tiny|real OUT}
OUT=${2:?usage: $0 tiny|real OUT}
case "$SIZE" in tiny|real) ;; *) echo "size must be tiny or real, got $SIZE" >&2; exit 2 ;; esac
PY=${PYTHON:-python}
STEPS=${STEPS:-3}
MODEL=qwen2.5-vl-3b
RECIPES=recipes/$MODEL
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false HF_DATASETS_DISABLE_PROGRESS_BARS=1

GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")
if [ "$SIZE" = real ] && [ "$GPUS" = 0 ]; then echo "size real needs a GPU (none seen by torch)" >&2; exit 2; fi
NPROC=${NPROC:-$([ "$GPUS" -gt 0 ] && echo "$GPUS" || echo 1)}
if [ "$SIZE" = tiny ]; then
    N_TRAIN=${N_TRAIN:-60}; N_EVAL=${N_EVAL:-12}; EVAL_LIMIT=${EVAL_LIMIT:-12}
    PRECISION=(--bf16 false --dtype float32)  # the recipes' bf16 is slow on a CPU
else
    N_TRAIN=${N_TRAIN:-600}; N_EVAL=${N_EVAL:-60}; EVAL_LIMIT=${EVAL_LIMIT:-30}
    PRECISION=()
fi
if $PY -c "import deepspeed" 2>/dev/null; then
    ZERO=${ZERO:-"2 3"}
else
    ZERO=none  # DeepSpeed is an optional extra: launch without it (runs named zeronone-*), as the summary says
fi
TIME=()
if /usr/bin/time -v true 2>/dev/null; then TIME=(/usr/bin/time -v -o); fi

SUMMARY=$OUT/summary.md
{
    echo "# Real-model path, end to end: random $MODEL ($SIZE)"
    echo
    echo "$(date -u +%FT%TZ); $(uname -n); GPUs: $GPUS; processes per launch: $NPROC; DeepSpeed ZeRO stages: $ZERO"
    $PY -c "import torch, transformers, trl, peft, accelerate; print('torch', torch.__version__, '| transformers', transformers.__version__, '| trl', trl.__version__, '| peft', peft.__version__, '| accelerate', accelerate.__version__)"
    if [ "$GPUS" -gt 0 ]; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1; fi
    echo
    echo "| stage | exit | wall s | peak host RSS GiB | peak GPU GiB (rank 0) | command |"
    echo "|---|---|---|---|---|---|"
} > "$SUMMARY"

# stage NAME COMMAND...: run, log, time, and add a row to the summary; stops the script on failure.
stage() {
    local name=$1; shift
    local log=$OUT/logs/$name.log timing=$OUT/logs/$name.time start end code=0
    echo "== $name: $*"
    start=$(date +%s.%N)
    if [ ${#TIME[@]} -gt 0 ]; then "${TIME[@]}" "$timing" "$@" > "$log" 2>&1 || code=$?
    else "$@" > "$log" 2>&1 || code=$?; fi
    end=$(date +%s.%N)
    local wall rss gpu
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    rss=$( [ -f "$timing" ] && awk -F': ' '/Maximum resident set size/ { printf "%.2f", $2 / 1048576 }' "$timing" || echo "")
    gpu=$(grep -o 'peak GPU memory of this process: [0-9.]*' "$log" | tail -1 | awk '{ print $NF }' || true)
    local command="$*"
    echo "| $name | $code | $wall | ${rss:--} | ${gpu:--} | \`${command//$OUT/OUT}\` |" >> "$SUMMARY"
    if [ "$code" != 0 ]; then echo "stage $name failed (exit $code); last lines of $log:" >&2; tail -20 "$log" >&2; exit "$code"; fi
}

DEVICE=()
if [ "$GPUS" -gt 0 ]; then DEVICE=(--device cuda); fi  # initialising 3.75B parameters on a CPU takes minutes
stage checkpoint $PY -m stepcritic.train.tiny.offline_models --model $MODEL --size "$SIZE" --out "$OUT/model" "${DEVICE[@]}"
stage synth-train $PY -m stepcritic data synth --n "$N_TRAIN" --seed 0 --out "$OUT/data/chains"
stage synth-heldout $PY -m stepcritic data synth --n "$N_EVAL" --seed 1000 --out "$OUT/data/heldout-chains"
for kind in critique-sft prm-sft critique-pref outcome-rm; do
    stage "build-$kind" $PY -m stepcritic data build --chains "$OUT/data/chains" --kind "$kind" --out "$OUT/data/$kind"
done

declare -A KIND=([sft]=critique-sft [prm]=prm-sft [dpo]=critique-pref [reward]=outcome-rm)
run_args() {  # ARGS = the overrides every run gets: this data, this model, a few steps, evaluation at the end
    local method=$1 run=$2
    ARGS=(--config "$RECIPES/$method-lora.yaml" --model_name_or_path "$OUT/model"
          --dataset_path "$OUT/data/${KIND[$method]}" --output_dir "$run" --max_steps "$STEPS"
          --eval_steps "$STEPS" --max_eval_samples 16 --save_strategy no --report_to none "${PRECISION[@]}")
}
for method in sft prm dpo reward; do
    run_args "$method" "$OUT/runs/dry-run"
    stage "dry-run-$method" $PY -m stepcritic train "${ARGS[@]}" --dry-run
done

for zero in $ZERO; do
    if [ "$zero" = none ]; then  # runs named zeronone-*: plain accelerate launch, no DeepSpeed
        LAUNCH=($PY -m accelerate.commands.launch --num_processes "$NPROC" --num_machines 1 --dynamo_backend no
                --mixed_precision "$([ "$SIZE" = real ] && echo bf16 || echo no)")
        [ "$GPUS" = 0 ] && LAUNCH+=(--cpu)
    else
        LAUNCH=($PY -m accelerate.commands.launch --config_file "recipes/accelerate/zero$zero.yaml" --num_processes "$NPROC")
    fi
    for method in sft prm dpo reward; do
        run_args "$method" "$OUT/runs/zero$zero-$method"
        stage "train-zero$zero-$method" "${LAUNCH[@]}" -m stepcritic.train "${ARGS[@]}"
    done
done

last=$(echo "$ZERO" | awk '{ print $1 }')
RUNS=$OUT/runs/zero$last
stage eval $PY -m stepcritic eval --chains "$OUT/data/heldout-chains" --limit "$EVAL_LIMIT" --no-progress \
    --judge "hf:$RUNS-sft,mode=critique,max_new_tokens=128" --judge "hf:$RUNS-dpo,mode=critique,max_new_tokens=128" \
    --judge "prm:$RUNS-prm" --judge "reward:$RUNS-reward" --judge always-correct --judge random,rate=0.3,seed=0 \
    --out "$OUT/eval"

{
    echo
    echo "Evaluation (runs of ZeRO stage $last; random weights, so the numbers only show the path works):"
    echo
    awk '/^\| Judge/ { on = 1 } on && /^$/ { exit } on' "$OUT/eval/report.md" | sed "s#$OUT#OUT#g"  # the leaderboard
} >> "$SUMMARY"
echo "summary: $SUMMARY"
cat "$SUMMARY"
