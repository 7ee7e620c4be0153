#!/usr/bin/env bash
# The GPU check: the packaged SmolLM2-135M (its GGUF) on one CUDA GPU, through the same CLI as on a CPU.
#
#   GGUF=/path/SmolLM2-135M-Instruct.Q4_1.gguf OUT=/tmp/gpucheck bash bench/gpu/device_check.sh
#
# 0. `bench/gpu/rollout_profile.py`: the decode step of the HF engine (bare, with LoRA, merged) and of the graph
#    engine (what `--rollout-engine auto` picks on CUDA) against transformers' generate, a profile of where it goes,
#    and the graph engine's greedy tokens against the unmerged LoRA model's;
# 1. `workbench eval` of the shipped RL adapter on the world's 89 test questions (greedy, bf16 on CUDA), and with
#    PROFILE_EVAL_LIMIT set, 24 of them under cProfile (eval_profile.txt: the engine loop's Python time by function);
# 2. the recipe's RL stage (README, 8 steps from the shipped SFT adapter) on CUDA, then the same eval of its
#    adapter;
# 3. `bench/gpu/suite.py` on random-initialised Qwen2.5 0.5B and 7B (rollout and training tokens/s, MFU, peak
#    memory, gradient checkpointing's saving, the largest group × length that fits).
# The stages run in that order (the rollout profile first: it is short and holds the decode-step figure) under one
# budget, BUDGET seconds (default 480: the 8 minutes of one device call); each stage also has its own limit
# (PROFILE_LIMIT 90, EVAL_LIMIT 120, PROFILE_EVAL_LIMIT 0 = skipped, TRAIN_LIMIT 200, EVAL2_LIMIT 90, SUITE_LIMIT
# 30 a model) and gets what is left of the budget when it is less, so a slow stage leaves the others' results and the
# whole script ends within the budget. Everything lands in $OUT: log.txt (all output; each stage ends with a line
# "[name] rc=N seconds=S", rc 124 where its limit stopped it, or "[name] skipped"), rollout_profile.json,
# eval_profile.txt, eval.tgz / train.tgz (the runs without checkpoints), suite-*.json. On 2026-11-26 an H200 ran 5 of
# the 8 RL steps in 170 s and did not finish the eval in 100 s (bench/RESULTS.md, "First run on a GPU"): whether
# every stage fits 8 minutes is not yet known. Needs torch with CUDA, transformers, peft, accelerate and this
# package's other imports (bm25s, duckdb, rapidfuzz, tenacity, gguf); nothing is downloaded (HF_HUB_OFFLINE=1).
#
# STAGES (default profile,eval,train,suite) runs a subset; the profile and the suite need only the model's config and
# tokenizer, MODEL_DIR (default: GGUF), so they can run before a large GGUF has arrived (GGUF is needed for eval and
# train only).
#
# DEVICE=cpu is a dry run on a machine without a GPU (tests/test_gpu_suite.py runs it): every stage at a toy size
# (the profile and the suite on their 2-layer --tiny configs, 2 questions an eval, turns of 2 x 24 tokens, one RL
# step of one question x 2 samples), so the script is checked end to end except for CUDA itself.
set -u
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
STAGES=${STAGES:-profile,eval,train,suite}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
if want eval || want train; then : "${GGUF:?set GGUF to the SmolLM2-135M-Instruct GGUF file}"; fi
GGUF=${GGUF:-}; MODEL_DIR=${MODEL_DIR:-$GGUF}
: "${MODEL_DIR:?set MODEL_DIR (a model directory: config and tokenizer) or GGUF}"
: "${OUT:?set OUT to the folder the results go to}"
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then DRY=(--tiny); STEPS=${STEPS:-1} LIMIT=${LIMIT:---limit 2} QPS=${QPS:-1} GROUP=${GROUP:-2}
  PROFILE_N=${PROFILE_N:-2} SUITE_MODELS=${SUITE_MODELS:-tiny}
  # toy turns too (the wiring is what a dry run checks): under the adapters' trained budget, so said as an override
  TURNS=${TURNS:-2} TOKENS=${TOKENS:-24} OVERRIDE=(--override-adapter)
else DRY=(); OVERRIDE=(); fi
TURNS=${TURNS:-4}; TOKENS=${TOKENS:-64}
STEPS=${STEPS:-8}; LIMIT=${LIMIT:-}; QPS=${QPS:-3}; GROUP=${GROUP:-8}; PROFILE_N=${PROFILE_N:-24}
BUDGET=${BUDGET:-480}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
WORK=$(mktemp -d)
DEADLINE=$(( $(date +%s) + BUDGET ))
stage() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }
timed() {  # timed SECONDS NAME CMD...: run CMD within its limit and what is left of the budget; print its seconds
  local limit=$1 name=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) ))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 5 ]; then echo "[$name] skipped (limit 0 or the ${BUDGET} s budget is spent)"; return; fi
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
echo "budget ${BUDGET} s, device $DEVICE, stages $STAGES, $STEPS RL steps"

if want profile; then
stage "rollout profile: SmolLM2-135M's decode step, 24 rows, then groups of 8 and 32"
timed ${PROFILE_LIMIT:-90} profile $PY bench/gpu/rollout_profile.py --model-dir "$MODEL_DIR" "${DRY[@]}" \
  --out "$OUT/rollout_profile.json"
fi

RECIPE=(--max-turns "$TURNS" --max-new-tokens "$TOKENS" "${OVERRIDE[@]}" --no-progress)
EVAL=(eval --model "$GGUF" --device "$DEVICE" --method search_r1+lora --split test
      --protocol-kwargs '{"observation_mode": "chat"}' "${RECIPE[@]}")

if want eval; then
stage "eval: shipped adapter data/adapters/search_r1-sft-grpo, 89 test questions"
timed ${EVAL_LIMIT:-120} eval-shipped $PY -m workbench "${EVAL[@]}" $LIMIT \
  --adapter data/adapters/search_r1-sft-grpo --out "$WORK/eval" --name gpu-shipped

stage "eval under cProfile: $PROFILE_N test questions (where the engine's multi-turn loop spends its time)"
timed ${PROFILE_EVAL_LIMIT:-0} eval-profiled $PY -m cProfile -o "$WORK/eval.prof" -m workbench "${EVAL[@]}" \
  --limit "$PROFILE_N" --adapter data/adapters/search_r1-sft-grpo --out "$WORK/eval" --name gpu-profiled
[ -f "$WORK/eval.prof" ] && $PY -c "import pstats, sys; s = pstats.Stats(sys.argv[1], stream=open(sys.argv[2], 'w'));
s.sort_stats('tottime').print_stats(30); s.sort_stats('cumulative').print_stats(40)" "$WORK/eval.prof" \
  "$OUT/eval_profile.txt"
fi

if want train; then
stage "train: the recipe's RL stage ($STEPS steps) from data/adapters/search_r1-sft"
timed ${TRAIN_LIMIT:-200} train $PY -m workbench train --model "$GGUF" --device "$DEVICE" --method search_r1 \
  --reward dynasearcher --encoder none --init-adapter data/adapters/search_r1-sft \
  --question-types '["1hop","compositional","comparison","inference"]' --temperature 0.7 --steps "$STEPS" \
  --questions-per-step "$QPS" --group-size "$GROUP" --max-total-tokens 1536 --lr 1e-4 \
  --loss-overrides '{"kl_coef": 0.0, "dynamic_filter": true, "filter_max_rounds": 1}' \
  --micro-batching shared_prefix --seed 0 --eval-limit 0 --save-every "$STEPS" "${RECIPE[@]}" --out "$WORK/train"
RUN=$(ls -d "$WORK"/train/*/ 2>/dev/null | head -1)
if [ -n "$RUN" ]; then
  stage "eval: the adapter trained here, 89 test questions"
  timed ${EVAL2_LIMIT:-90} eval-trained $PY -m workbench "${EVAL[@]}" $LIMIT --adapter "${RUN%/}" \
    --out "$WORK/eval" --name gpu-trained
fi
fi

if want suite; then
stage "suite: random-initialised Qwen2.5 0.5B and 7B"
for m in ${SUITE_MODELS:-qwen2.5-0.5b qwen2.5-7b}; do
  if [ "$m" = tiny ]; then SIZES=(--tiny); else SIZES=(--models "$m" --groups 1,8,32 --new-tokens 128 --reps 1
    --fit-lengths 2048,8192); fi
  timed ${SUITE_LIMIT:-30} "suite-$m" $PY bench/gpu/suite.py "${SIZES[@]}" --tokenizer "$MODEL_DIR" \
    --out "$OUT/suite-$m.json" ${SUITE_ARGS:-}
done
fi

stage "pack"
tar -C "$WORK" -czf "$OUT/eval.tgz" eval 2>/dev/null
tar -C "$WORK" --exclude='trainer_state.safetensors' --exclude='examples.jsonl' --exclude='steps' \
  -czf "$OUT/train.tgz" train 2>/dev/null
ls -la "$OUT"
