#!/usr/bin/env bash
# A 20-step single-GPU training run of the real binary, fp32 and bf16 (label gpu): a VALID run file whose
# provenance names the GPU, /ranks its device, and every step's memory the caching allocator's counters;
# then a run too large for the GPU's memory (but not for the node's: 2048 x 32768 tokens of the tiny model
# need ~370 GiB) is refused before it writes anything, naming the GPU; and `lorabench plan` and a run's own
# prediction on the GPU.
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
    --set run.name=gpu-$dtype --set profile.peak_gflops=0 --set profile.mem_bandwidth_gbs=0 \
    >"$work/$dtype.log" 2>&1 ||
    { cat "$work/$dtype.log" >&2; echo "FAIL: the $dtype run failed" >&2; exit 1; }
  grep -q "device cuda:" "$work/$dtype.log" || { cat "$work/$dtype.log" >&2; echo "FAIL: no CUDA device in the log" >&2; exit 1; }
  # The roofline's bandwidth measured on the GPU (a triad on its memory; an H100/H200's HBM gives TB/s).
  grep -E "^memory bandwidth: [0-9.]+ GB/s per rank \(measured: STREAM-style triad .* on cuda:" "$work/$dtype.log" ||
    { cat "$work/$dtype.log" >&2; echo "FAIL: no bandwidth measured on the GPU" >&2; exit 1; }
  "$check" gpu-run "outputs/gpu-$dtype/run.h5" 1 20
  "$check" schema-doc "outputs/gpu-$dtype/run.h5" "$src/docs/hdf5-schema.md"  # a GPU run's attributes too
  # model.cuda_attention = auto: FlashAttention-2 in bf16, the memory-efficient kernel in fp32.
  kernel=efficient; [[ $dtype == bf16 ]] && kernel=flash
  got=$(h5dump -a /provenance/attention_kernel "outputs/gpu-$dtype/run.h5" | sed -n 's/^ *(0): //p' | tr -d '"')
  [[ $got == "$kernel" ]] || { echo "FAIL: $dtype: provenance attention_kernel '$got', expected $kernel" >&2; exit 1; }
done
if "$lb" "$src/inputs/tiny.ini" --set parallel.device=cuda --set data.seq_len=32768 --set train.micro_batch=2048 \
    --set run.name=gpu-too-large >"$work/large.log" 2>&1; then
  cat "$work/large.log" >&2; echo "FAIL: a run needing ~370 GiB of GPU memory was not refused" >&2; exit 1
fi
grep -q "this run cannot fit: .* and GPU cuda:0 has .* available for 1 rank" "$work/large.log" ||
  { cat "$work/large.log" >&2; echo "FAIL: not the GPU memory refusal" >&2; exit 1; }
[[ ! -e outputs/gpu-too-large ]] || { echo "FAIL: the refused run wrote outputs/gpu-too-large" >&2; exit 1; }
# The planner on the GPU: the probe runs on cuda:0, the rank's memory is the GPU's; a run records its own
# prediction, and the tensor peak predicted is within 10% of the caching allocator's measured peak.
"$lb" plan "$src/inputs/tiny.ini" --set parallel.device=cuda -n 1 --tsv plan.tsv >plan.md 2>&1 ||
  { cat plan.md >&2; echo "FAIL: lorabench plan on the GPU failed" >&2; exit 1; }
grep -q "| reserved / rank | GPU memory / rank |" plan.md || { cat plan.md >&2; echo "FAIL: not a GPU plan" >&2; exit 1; }
grep -q "probe: 1- and 2-layer models on cuda:0" plan.md || { cat plan.md >&2; echo "FAIL: the probe did not run on the GPU" >&2; exit 1; }
awk -F'\t' 'NR == 2 { exit !($17 == "cuda:0" && $15 >= $7 && $10 == 1) }' plan.tsv ||
  { cat plan.tsv >&2; echo "FAIL: plan.tsv: device, reserved >= tensor peak, fits" >&2; exit 1; }
"$lb" "$src/inputs/tiny.ini" --set run.steps=6 --set parallel.device=cuda --set model.dtype=bf16 --set run.predict=true \
  --set run.name=gpu-predicted --set profile.peak_gflops=0 >"$work/predicted.log" 2>&1 ||
  { cat "$work/predicted.log" >&2; echo "FAIL: the run with run.predict failed" >&2; exit 1; }
h5num() { h5dump -a "/metrics/summary/$2" "$1" | sed -n 's/^ *(0): //p' | head -n 1; }
predicted=$(h5num outputs/gpu-predicted/run.h5 predicted_tensor_peak_bytes)
measured=$(h5num outputs/gpu-predicted/run.h5 mem_peak_bytes_max)
reserved_p=$(h5num outputs/gpu-predicted/run.h5 predicted_reserved_bytes)
reserved_m=$(h5num outputs/gpu-predicted/run.h5 mem_reserved_peak_bytes_max)
echo "tensor peak: predicted $predicted, measured $measured; reserved: predicted $reserved_p, measured $reserved_m"
awk -v p="$predicted" -v m="$measured" 'BEGIN { exit !(m > 0 && p / m > 0.9 && p / m < 1.1) }' ||
  { echo "FAIL: the predicted tensor peak $predicted is not within 10% of the measured $measured" >&2; exit 1; }
[[ -n $reserved_p && -n $reserved_m ]] || { echo "FAIL: no reserved prediction or measurement in the run file" >&2; exit 1; }
echo ok
