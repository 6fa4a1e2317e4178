#!/usr/bin/env bash
# bench_peers_e2e.sh CASE PYTHON LORABENCH SOURCE_DIR WORK_DIR (tests/e2e/bench_peers.cmake)
#   valid     scripts/bench.sh --quick must pass the step-0 loss check and print both sides' rows
#   mismatch  the same with the peer on another seed's tokens must fail with INVALID
set -euo pipefail
case_name="$1" py="$2" lorabench="$3" src="$4" work="$5"
mkdir -p "$work"
export LORABENCH_BENCH_MODELS="$work/models"  # the tiny snapshot, shared by both cases
out="$work/$case_name.out" err="$work/$case_name.err"
cmd=("$py" "$src/bench/run_bench.py" --lorabench "$lorabench" --quick --device cpu)
case "$case_name" in
  valid)
    "${cmd[@]}" >"$out" 2>"$err" || { cat "$out" "$err"; echo "FAIL: the quick benchmark failed"; exit 1; }
    for row in "| tiny-bf16 | lorabench single | 1 |" "| tiny-bf16 | hf-eager | 1 |"; do
      grep -qF -- "$row" "$out" || { cat "$out"; echo "FAIL: no row '$row'"; exit 1; }
    done
    grep -q "INVALID" "$out" "$err" && { cat "$out" "$err"; echo "FAIL: INVALID in a passing run"; exit 1; }
    ;;
  mismatch)
    if "${cmd[@]}" --fault-peer-seed-offset 1 >"$out" 2>"$err"; then
      cat "$out" "$err"; echo "FAIL: the equal-work check passed on different tokens"; exit 1
    fi
    grep -q "INVALID: tiny-bf16: hf-eager step-0 loss" "$err" ||
      { cat "$out" "$err"; echo "FAIL: not the equal-work check"; exit 1; }
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS: $case_name"
