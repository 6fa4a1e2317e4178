#!/usr/bin/env bash
# scripts/gpu_check.sh run, its flow on a machine without a GPU: every step runs and is recorded in
# OUT/summary.md in order, a skipped gpu test counts as a failure of the check, the exit code says so, and
# a run cut off by the lent machine's time limit still leaves a whole summary that says it is incomplete.
# The build it runs against is a scratch one: the real lorabench and lorabench-report, and a CTest file
# with one gpu-labelled test that skips as the real ones do without a GPU and one device unit test
# (the real gpu tests run in this build's own ctest; running them here would nest ctest in its build tree).
#   gpu_check_flow.sh LORABENCH LORABENCH_REPORT SOURCE_DIR WORK_DIR
set -euo pipefail
lorabench="$(realpath "$1")" report="$(realpath "$2")" src="$(realpath "$3")" work=$4
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"
work="$(pwd -P)"

mkdir -p build/src/app build/postprocess carry/debs
ln -s "$lorabench" build/src/app/lorabench
ln -s "$report" build/postprocess/lorabench-report
cat >build/CTestTestfile.cmake <<'CT'
add_test(gpu_needs_a_gpu "/bin/sh" "-c" "echo 'no GPU visible'; exit 77")
set_tests_properties(gpu_needs_a_gpu PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77)
add_test(test_device_flow "/bin/true")
CT

steps=(single_fp32 zero2_1rank_nccl_fp32 fsdp_1rank_nccl_fp32 nccl_1rank_losses_match_single doctor_1rank
       ctest_gpu gpu_tests_not_skipped ctest_device_unit doctor_2ranks_shared ddp_2ranks_fp32 zero1_2ranks_fp32 zero2_2ranks_fp32 fsdp_2ranks_fp32 tp2_2ranks_fp32
       single_bf16 ddp_2ranks_bf16 zero1_2ranks_bf16 zero2_2ranks_bf16 fsdp_2ranks_bf16 tp2_2ranks_bf16
       single_small_bf16 single_small_bf16_efficient qwen3_5_tiny_bf16 plan_gpu plan_gpu_2ranks_shared report)

# The whole flow: it fails (the gpu test skipped), and says which steps did.
export LB_GPU_CHECK_BUILD=$work/build
run nonzero full.log "$src/scripts/gpu_check.sh" run out carry
sum=out/summary.md
[[ -f $sum ]] || fail "no $sum"
expect_not_in "$sum" "Incomplete"
expect_in "$sum" "| gpu_tests_not_skipped | FAILED (exit 1) |"
expect_in "$sum" "| ctest_gpu | ok |"
expect_in "$sum" "| ctest_device_unit | ok |"
expect_in "$sum" "## failures"
# No GPU here, so the test that needs two is left out and said so, rather than skipped.
expect_in "$sum" "not run here: test_comm_nccl_gpu_np2 (needs 2 GPUs; 0 visible)"
got=$(grep -oE '^\| [a-z0-9_]+ \| (ok|FAILED)' "$sum" | awk '{print $2}' | tr '\n' ' ')
[[ $got == "${steps[*]} " ]] || fail "steps in $sum: '$got', expected '${steps[*]} '"
n_failed=$(grep -c '| FAILED' "$sum")
expect_in full.log "gpu_check: $n_failed step(s) failed"

# `build` alone (the first command on the lent machine): here only its bookkeeping, as the build is given.
# The packages unpacked by `run` are kept (the build made against them stays up to date) until the carried
# packages change.
touch carry/root/marker
run 0 build.log "$src/scripts/gpu_check.sh" build bout carry
expect_not_in bout/summary.md "Incomplete"
[[ -e carry/root/marker ]] || fail "build unpacked the same packages again"
touch carry/debs/changed
run 0 build2.log "$src/scripts/gpu_check.sh" build bout2 carry
[[ ! -e carry/root/marker ]] || fail "the carried packages changed but were not unpacked again"
rm carry/debs/changed

# Cut off after doctor_2ranks_shared (its ninth step), as the device tool's time limit would: the summary so
# far, marked incomplete.
setsid "$src/scripts/gpu_check.sh" run cut carry >cut.log 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -qF "| doctor_2ranks_shared |" cut/summary.md 2>/dev/null && break
  sleep 0.1
done
kill -TERM -- "-$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
expect_in cut/summary.md "| doctor_2ranks_shared |"
expect_in cut/summary.md "**Incomplete**"
expect_not_in cut/summary.md "| report |"
echo "ok: ${#steps[@]} steps recorded in order, $n_failed failed; a cut-off run's summary says it is incomplete"
