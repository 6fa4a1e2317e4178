#!/usr/bin/env bash
# A 20-step single-GPU training run of the real binary, fp32 and bf16 (label gpu): a VALID run file whose
# provenance names the GPU, /ranks its device, and every step's memory the caching allocator's counters;
# then a run too large for the GPU's memory (but not for the node's: 64 x 1048576 tokens of the tiny model
# need ~370 GiB) is refused before it writes anything, naming the GPU.
# Exits 77 (ctest: Skipped) with the reason when no GPU is visible.
#   gpu_train_e2e.sh LORABENCH SOURCE_DIR CHECKER
set -euo pipefail
lb=$1 src=$2 check=$3
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; } && [[ ! -e /dev/nvidia0 ]]; then
  echo "SKIPPED: no GPU visible (nvidia-smi -L fails and there is no /dev/nvidia0)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
for dtype in fp32 bf16; do
  "$lb" "$src/inputs/tiny.ini" --set run.steps=20 --set parallel.device=cuda --set model.dtype=$dtype \
    --set run.name=gpu-$dtype --set profile.peak_gflops=0 >"$work/$dtype.log" 2>&1 ||
    { cat "$work/$dtype.log" >&2; echo "FAIL: the $dtype run failed" >&2; exit 1; }
  grep -q "device cuda:" "$work/$dtype.log" || { cat "$work/$dtype.log" >&2; echo "FAIL: no CUDA device in the log" >&2; exit 1; }
  "$check" gpu-run "outputs/gpu-$dtype/run.h5" 1 20
done
if "$lb" "$src/inputs/tiny.ini" --set parallel.device=cuda --set data.seq_len=1048576 --set train.micro_batch=64 \
    --set run.name=gpu-too-large >"$work/large.log" 2>&1; then
  cat "$work/large.log" >&2; echo "FAIL: a run needing ~370 GiB of GPU memory was not refused" >&2; exit 1
fi
grep -q "this run cannot fit: .* and GPU cuda:0 has .* available for 1 rank" "$work/large.log" ||
  { cat "$work/large.log" >&2; echo "FAIL: not the GPU memory refusal" >&2; exit 1; }
[[ ! -e outputs/gpu-too-large ]] || { echo "FAIL: the refused run wrote outputs/gpu-too-large" >&2; exit 1; }
echo ok
