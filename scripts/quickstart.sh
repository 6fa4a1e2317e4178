#!/usr/bin/env bash
# The main job on the embedded default: the Qwen2.5-0.5B architecture (random init; set model.path in
# inputs/quickstart.ini for real weights), bf16, 256-token sequences, LoRA r16 on all seven projections,
# one thread per rank. Runs one rank, then DDP, ZeRO-1, ZeRO-2 and FSDP on 2 ranks, and writes
# outputs/report.md comparing them.
#   scripts/quickstart.sh                       # install, build, run, report
#   QUICKSTART_STEPS=20 scripts/quickstart.sh   # longer runs
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${LORABENCH_BUILD_DIR:-$here/build}"
export LORABENCH_BUILD_DIR="$build"
steps="${QUICKSTART_STEPS:-8}"
out="$here/outputs"

"$here/scripts/install-deps.sh"
"$here/scripts/build.sh"

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
bin="$build/src/app/lorabench"
mpirun=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
stamp="$(date +%Y%m%d-%H%M%S)"
runs=()
run() {  # run NAME RANKS STRATEGY
  local name="qs-$1-$stamp" n="$2" strategy="$3"
  echo "== $name: $strategy on $n rank(s)"
  "${mpirun[@]}" -n "$n" "$bin" "$here/inputs/quickstart.ini" --set run.name="$name" \
    --set run.output_dir="$out" --set parallel.strategy="$strategy" --set run.steps="$steps"
  runs+=("$out/$name/run.h5")
}
run single 1 single
run ddp 2 ddp
run zero1 2 zero1
run zero2 2 zero2
run fsdp 2 fsdp
"${mpirun[@]}" -n 2 "$bin" comm --ops all_reduce,all_gather,reduce_scatter --min-bytes 1024 \
  --max-bytes 67108864 --factor 4 --iters 10 --warmup 2 -o "$out/qs-comm-$stamp.h5"
runs+=("$out/qs-comm-$stamp.h5")

"$build/postprocess/lorabench-report" "${runs[@]}" -o "$out/report.md" --charts "$out/charts"
echo
echo "runs:   ${runs[*]}"
echo "report: $out/report.md (charts in $out/charts)"
