#!/usr/bin/env bash
# The GPU check: the packaged SmolLM2-135M (its GGUF) on one CUDA GPU, through the same CLI as on a CPU.
#
#   GGUF=/path/SmolLM2-135M-Instruct.Q4_1.gguf OUT=/tmp/gpucheck bash bench/gpu/device_check.sh
#
# 0. `bench/gpu/rollout_profile.py`: the decode step of the HF engine (bare, with LoRA, merged) against
#    transformers' generate, and a profile of where it goes;
# 1. `workbench eval` of the shipped RL adapter on the world's 89 test questions (greedy, bf16 on CUDA), then
#    24 of them under cProfile (eval_profile.txt: the engine loop's Python time by function);
# 2. the recipe's RL stage (README, 8 steps from the shipped SFT adapter) on CUDA, then the same eval of its
#    adapter;
# 3. `bench/gpu/suite.py` on random-initialised Qwen2.5 0.5B and 7B (rollout and training tokens/s, MFU, peak
#    memory, gradient checkpointing's saving, the largest group × length that fits).
# Each stage has its own time limit, so a slow one leaves the others' results. Everything lands in $OUT: log.txt
# (all output), rollout_profile.json, eval_profile.txt, eval.tgz / train.tgz (the runs without checkpoints),
# suite-*.json. The limits (PROFILE_LIMIT, EVAL_LIMIT, PROFILE_EVAL_LIMIT, TRAIN_LIMIT, EVAL2_LIMIT, SUITE_LIMIT,
# in seconds) add up to about 19 min; lower them to fit a shorter lease. On 2026-11-26 an H200 ran 5 of the 8 RL
# steps in 170 s and did not finish the eval in 100 s (bench/RESULTS.md, "First run on a GPU"). Needs torch with
# CUDA, transformers, peft, accelerate and this package's other imports (bm25s, duckdb, rapidfuzz, tenacity, gguf);
# nothing is downloaded (HF_HUB_OFFLINE=1).
set -u
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
: "${GGUF:?set GGUF to the SmolLM2-135M-Instruct GGUF file}"
: "${OUT:?set OUT to the folder the results go to}"
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}   # cpu: a dry run of this script on a machine without a GPU (with STEPS=1 LIMIT="--limit 2")
STEPS=${STEPS:-8}
LIMIT=${LIMIT:-}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
WORK=$(mktemp -d)
stage() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }
timed() {  # timed SECONDS NAME CMD...: run CMD with a limit, print its wall seconds and exit status
  local limit=$1 name=$2; shift 2
  local t0; t0=$(date +%s%N)
  timeout "$limit" "$@"; local rc=$?
  echo "[$name] rc=$rc seconds=$(( ($(date +%s%N) - t0) / 1000000 ))e-3"
}

stage "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
$PY -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'transformers', transformers.__version__, 'peft', peft.__version__,
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')"
git log -1 --format='commit %h %s' 2>/dev/null || true

stage "rollout profile: SmolLM2-135M's decode step, 24 rows"
timed ${PROFILE_LIMIT:-120} profile $PY bench/gpu/rollout_profile.py --model-dir "$GGUF" --out "$OUT/rollout_profile.json"

RECIPE=(--max-turns 4 --max-new-tokens 64 --no-progress)
EVAL=(eval --model "$GGUF" --device "$DEVICE" --method search_r1+lora --split test $LIMIT
      --protocol-kwargs '{"observation_mode": "chat"}' "${RECIPE[@]}")

stage "eval: shipped adapter data/adapters/search_r1-sft-grpo, 89 test questions, CUDA"
timed ${EVAL_LIMIT:-240} eval-shipped $PY -m workbench "${EVAL[@]}" --adapter data/adapters/search_r1-sft-grpo \
  --out "$WORK/eval" --name gpu-shipped

stage "eval under cProfile: 24 test questions (where the engine's multi-turn loop spends its time)"
timed ${PROFILE_EVAL_LIMIT:-150} eval-profiled $PY -m cProfile -o "$WORK/eval.prof" -m workbench "${EVAL[@]}" \
  --limit 24 --adapter data/adapters/search_r1-sft-grpo --out "$WORK/eval" --name gpu-profiled
[ -f "$WORK/eval.prof" ] && $PY -c "import pstats, sys; s = pstats.Stats(sys.argv[1], stream=open(sys.argv[2], 'w'));
s.sort_stats('tottime').print_stats(30); s.sort_stats('cumulative').print_stats(40)" "$WORK/eval.prof" \
  "$OUT/eval_profile.txt"

stage "train: the recipe's RL stage (8 steps) from data/adapters/search_r1-sft, CUDA"
timed ${TRAIN_LIMIT:-240} train $PY -m workbench train --model "$GGUF" --device "$DEVICE" --method search_r1 \
  --reward dynasearcher --encoder none --init-adapter data/adapters/search_r1-sft \
  --question-types '["1hop","compositional","comparison","inference"]' --temperature 0.7 --steps "$STEPS" \
  --questions-per-step 3 --group-size 8 --max-total-tokens 1536 --lr 1e-4 \
  --loss-overrides '{"kl_coef": 0.0, "dynamic_filter": true, "filter_max_rounds": 1}' \
  --micro-batching shared_prefix --seed 0 --eval-limit 0 --save-every "$STEPS" "${RECIPE[@]}" --out "$WORK/train"
RUN=$(ls -d "$WORK"/train/*/ 2>/dev/null | head -1)
if [ -n "$RUN" ]; then
  stage "eval: the adapter trained on CUDA, 89 test questions"
  timed ${EVAL2_LIMIT:-240} eval-trained $PY -m workbench "${EVAL[@]}" --adapter "${RUN%/}" \
    --out "$WORK/eval" --name gpu-trained
fi

stage "suite: random-initialised Qwen2.5 0.5B and 7B"
for m in ${SUITE_MODELS:-qwen2.5-0.5b qwen2.5-7b}; do
  timed ${SUITE_LIMIT:-75} "suite-$m" $PY bench/gpu/suite.py --models "$m" --groups 1,8,32 \
    --new-tokens 128 --reps 1 --fit-lengths 2048,8192 --tokenizer "$GGUF" --out "$OUT/suite-$m.json" ${SUITE_ARGS:-}
done

stage "pack"
tar -C "$WORK" -czf "$OUT/eval.tgz" eval 2>/dev/null
tar -C "$WORK" --exclude='trainer_state.safetensors' --exclude='examples.jsonl' --exclude='steps' \
  -czf "$OUT/train.tgz" train 2>/dev/null
ls -la "$OUT"
