#!/usr/bin/env bash
# A 20-step single-GPU training run of the real binary, fp32 and bf16 (label gpu): a VALID run file whose
# provenance names the GPU, /ranks its device, and every step's memory the caching allocator's counters.
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
echo ok
