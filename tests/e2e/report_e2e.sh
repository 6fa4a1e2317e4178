#!/usr/bin/env bash
# End to end: the real lorabench on inputs/tiny.ini (single on 1 rank, ddp on 2 ranks) and a 2-rank
# collective benchmark, then lorabench-report on the output directory (tests/e2e/report.cmake).
#   report_e2e.sh LORABENCH LORABENCH_REPORT TINY_INI WORKDIR MPIEXEC...
set -euo pipefail
lorabench=$1 report=$2 tiny=$3 work=$4
shift 4
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"

out="$work/outputs"
ev=(--set train.eval_every=3 --set data.eval_samples=6 --set run.predict=true)
run 0 single.log "$lorabench" "$tiny" --set run.output_dir="$out" --set run.name=single --set run.quiet=true "${ev[@]}"
run 0 ddp.log "${mpiexec[@]}" -n 2 "$lorabench" "$tiny" --set run.output_dir="$out" --set run.name=ddp \
  --set parallel.strategy=ddp --set run.quiet=true "${ev[@]}"
run 0 comm.log "${mpiexec[@]}" -n 2 "$lorabench" comm --ops all_reduce --min-bytes 1K --max-bytes 1M --factor 32 \
  --warmup 1 --iters 3 -o "$out/comm-2/run.h5"

run 0 report.log "$report" "$out" -o "$work/report.md"
md="$work/report.md"
# Both runs in the per-run table, completed with a verdict, and the ddp row in the scaling table with a
# speedup against the single run.
expect_re "$md" '^\| single \| C1 \| single \| 1 \| fp32 \| 2 x 1 x 1 = 2 \|.*\| (VALID|\*\*INVALID\*\*) \|$'
expect_re "$md" '^\| ddp \| C1 \| ddp \| 2 \| fp32 \| 2 x 1 x 2 = 4 \|.*\| (VALID|\*\*INVALID\*\*) \|$'
expect_re "$md" '^## Scaling$'
# The planner's prediction beside the measurement (run.predict): the tensor peak of the single run is
# predicted exactly (the probe measures the same code), within 10% for DDP.
expect_re "$md" '^## Prediction vs measurement$'
expect_re "$md" '^\| single \| single \| 1 \| [0-9.]+ [KMG]iB \| [0-9.]+ [KMG]iB \| 1\.00 \|'
expect_re "$md" '^\| ddp \| ddp \| 2 \| [0-9.]+ [KMG]iB \| [0-9.]+ [KMG]iB \| (0\.9[0-9]|1\.0[0-9]|1\.10) \|'
# Held-out evaluations after steps 3 and 6 of both runs (train.eval_every).
expect_re "$md" '^## Held-out evaluation$'
expect_re "$md" '^\| single \| single \| 1 \| 3: [0-9.]+ / [0-9.e+]+, 6: [0-9.]+ / [0-9.e+]+ \| 6 \|'
expect_re "$md" '^\| ddp \| ddp \| 2 \| 3: [0-9.]+ / [0-9.e+]+, 6: [0-9.]+ / [0-9.e+]+ \| 6 \|'
expect_re "$md" '^\| C1 \| single \| single \| 1 \| 2 \| [0-9.]+ \| 1\.00x \| 100\.0% \| single \|$'
expect_re "$md" '^\| C1 \| ddp \| ddp \| 2 \| 4 \| [0-9.]+ \| [0-9.]+x \| [0-9.]+% \| single \|$'
expect_re "$md" '^- \*\*ddp\*\* \(ddp, 2 ranks\): \*\*(compute|data|straggler|communication)-bound\*\*'
expect_re "$md" 'all_reduce moved .* per rank per step'
expect_re "$md" 'the collective benchmark \(comm\) reached'
expect_re "$md" '^\| all_reduce \| fp32 \| 1\.00 KiB \|'
expect_re "$md" '^## Hardware counters$'
for c in loss tokens_per_s memory phases; do
  [[ -s "$work/charts/$c.svg" ]] || fail "chart $c.svg missing"
  grep -q '</svg>' "$work/charts/$c.svg" || fail "chart $c.svg incomplete"
  expect_re "$md" "\\(charts/$c\\.svg\\)"
done
# The roofline (tiny.ini configures 50 GFLOP/s and 10 GB/s: the ridge at 5 FLOP/byte). The tiny model's
# weights are mostly its 151936-row head, read once per pass whatever the tokens: 64 tokens a step (the
# single run) put the step on compute, 4 tokens (micro-batch 1 of 4) on memory (the head's forward and its
# input gradient, 4 FLOP per weight byte a token, against the ridge of 5).
expect_re "$md" '^## Roofline$'
expect_re "$md" '^\| single \| 50(\.0+)? \| 10(\.0+)? \| configured \| 5(\.0+)? \|$'
expect_re "$md" '^\| single \| single \| 1 \| \*\*step\*\* \|.*\| compute \|'
run 0 few.log "$lorabench" "$tiny" --set run.output_dir="$work/few" --set run.name=few --set run.quiet=true \
  --set train.micro_batch=1 --set data.seq_len=4 --set run.steps=3 --set run.warmup_steps=1
run 0 report-few.log "$report" "$work/few/few/run.h5" "$out/single/run.h5" -o "$work/report-few.md"
expect_re "$work/report-few.md" '^\| few \| single \| 1 \| forward \|.*\| \*\*memory\*\* \|'
expect_re "$work/report-few.md" '^\| few \| single \| 1 \| \*\*step\*\* \|.*\| \*\*memory\*\* \|'
expect_re "$work/report-few.md" '^\| single \| single \| 1 \| \*\*step\*\* \|.*\| compute \|'
# A comm run alone, and the same directory twice (duplicates dropped).
run 0 report2.log "$report" "$out/comm-2/run.h5" "$out" "$out/single/run.h5"
grep -c '^| single | C1 |' report2.log | grep -qx 1 || fail "single listed more than once"
echo "ok"
