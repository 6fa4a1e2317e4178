#!/usr/bin/env bash
# bench_peers_e2e.sh CASE PYTHON LORABENCH SOURCE_DIR WORK_DIR (tests/e2e/bench_peers.cmake)
#   valid     scripts/bench.sh --quick must pass the step-0 loss check and print both sides' rows
#   mismatch  the same with the peer on another seed's tokens must fail with INVALID
#   profiles  lorabench-profile-ops (LORABENCH is then its path) and bench/profile_peer.py (eager and compiled)
#             on the tiny shape: each prints a group table with GEMMs and libtorch's flash attention kernels
#             (and, compiled, torch.compile's generated kernels), adding up to the step
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
  profiles)
    # check_groups FILE [ROW...]: the group table (after "| group |") has positive GEMMs and attention rows
    # and each ROW given, and its shares sum to the whole step (within rounding of the printed shares).
    check_groups() {
      "$py" - "$@" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
rows = re.search(r"\| group \|.*?\n\| --- .*?\n((?:\|.*\n?)+)", text)
if not rows:
    sys.exit(f"FAIL: no group table in {sys.argv[1]}")
shares = {}
for line in rows.group(1).strip().splitlines():
    cells = [c.strip() for c in line.strip("|").split("|")]
    shares[cells[0]] = float(cells[2].rstrip("%"))
for need in ["GEMMs", "attention (libtorch's flash kernels)"] + sys.argv[2:]:
    if shares.get(need, 0) <= 0:
        sys.exit(f"FAIL: no positive '{need}' row in {sys.argv[1]}: {shares}")
if abs(sum(shares.values()) - 100) > 1.0:
    sys.exit(f"FAIL: the groups add up to {sum(shares.values()):.1f}% of the step in {sys.argv[1]}: {shares}")
print(f"{sys.argv[1]}: {shares}")
PY
    }
    OMP_NUM_THREADS=1 "$lorabench" --preset tiny --steps 1 --warmup 1 >"$out.ours" 2>"$err" ||
      { cat "$out.ours" "$err"; echo "FAIL: lorabench-profile-ops failed"; exit 1; }
    check_groups "$out.ours"
    OMP_NUM_THREADS=1 "$py" "$src/bench/profile_peer.py" --preset tiny --steps 1 --warmup 1 >"$out.peer" 2>"$err" ||
      { cat "$out.peer" "$err"; echo "FAIL: profile_peer.py failed"; exit 1; }
    check_groups "$out.peer"
    # Under torch.compile the generated kernels are a group of their own, not time outside ops.
    OMP_NUM_THREADS=1 "$py" "$src/bench/profile_peer.py" --preset tiny --mode compile --steps 1 --warmup 2 \
      >"$out.compiled" 2>"$err" || { cat "$out.compiled" "$err"; echo "FAIL: profile_peer.py --mode compile failed"; exit 1; }
    check_groups "$out.compiled" "torch.compile's generated kernels"
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS: $case_name"
