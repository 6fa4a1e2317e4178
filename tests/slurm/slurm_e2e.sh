#!/usr/bin/env bash
# Label "slurm" (tests/slurm/slurm.cmake): a real one-node Slurm cluster on this machine
# (scripts/slurm/slurm_up.sh: munged, slurmctld, slurmd under WORKDIR/cluster), the project's batch scripts
# submitted to it with CI-sized inputs, and the daemons stopped by PID afterwards, also when a check fails.
#   slurm_e2e.sh CASE LORABENCH WORKDIR
# Cases:
#   ddp_2cpu   sbatch slurm/ddp_2cpu.sbatch (tiny input): exit code, run file status and Slurm provenance
#   preempt    sbatch slurm/zero_2cpu.sbatch, signalled mid-run (scancel --signal USR1, then TERM): it
#              checkpoints, exits 75, is requeued and resumes bit-identically to an uninterrupted job
#   srun_fsdp  salloc -n 2 srun lorabench inputs/fsdp.ini (shrunk with --set): plain srun in an allocation
#   matrix     slurm/submit_matrix.sh (no kind: the CPU scripts here), one run cancelled: the report says why
#   memory     slurm/memory_matrix.sh (no kind) with a tiny model and a memory limit that a larger one exceeds:
#              the failure is a row of the summary, the matrix goes on
set -euo pipefail
case_name=$1 lorabench=$2 work=$3 run_checker=${4:-}
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PATH=$PATH:/usr/sbin

cluster="$work/cluster"
# A cluster that an earlier, killed run of this test left behind: stop it before its pid files go.
[ -d "$cluster/run" ] && "$src/scripts/slurm/slurm_down.sh" "$cluster" >/dev/null 2>&1
source "$src/tests/e2e/lib.sh"
rm -rf "$work"
mkdir -p "$work"

# The cluster goes down whatever happens below (exit, failed check, SIGTERM/SIGINT). Every job has a
# Slurm time limit and every wait a timeout, all well inside the ctest TIMEOUT, so a hung job ends here
# and not by ctest's kill (which no trap survives; the next run then stops the stale cluster first).
down() {
  local rc=$?
  trap - EXIT INT TERM
  if [ $rc -ne 0 ] && [ -d "$cluster/log" ]; then
    echo "--- cluster logs (last lines) ---" >&2
    tail -n 15 "$cluster"/log/*.log >&2 || true
  fi
  "$src/scripts/slurm/slurm_down.sh" "$cluster" || rc=1
  exit $rc
}
trap down EXIT
trap 'exit 143' INT TERM

"$src/scripts/slurm/slurm_up.sh" "$cluster" >"$work/slurm_up.txt" 2>&1 || { cat "$work/slurm_up.txt" >&2; fail "slurm_up.sh"; }
export SLURM_CONF="$cluster/slurm.conf"
# Every case runs 2 ranks with one CPU each: a smaller node would leave the jobs pending until the timeout.
node_cpus=$(sinfo -h -N -o %c | head -n 1)
[ "${node_cpus:-0}" -ge 2 ] || fail "the cluster's node has ${node_cpus:-no} CPUs; the cases need 2 ($work/slurm_up.txt)"
export LORABENCH_BIN=$lorabench OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cd "$src"   # the scripts resolve inputs/ and slurm/ from $SLURM_SUBMIT_DIR, the directory sbatch ran in


# check_run RUN.h5 JOBID NTASKS: a completed run whose provenance names this Slurm job.
check_run() {
  local run=$1 job=$2 ntasks=$3
  [ -f "$run" ] || fail "no run file $run"
  h5dump -H "$run" >/dev/null || fail "h5dump cannot read $run"
  local v
  v=$(h5attr "$run" /status); [ "$v" = completed ] || fail "$run: status \"$v\", expected completed"
  v=$(h5attr "$run" /provenance/slurm_job_id); [ "$v" = "$job" ] || fail "$run: slurm_job_id \"$v\", expected $job"
  v=$(h5attr "$run" /provenance/slurm_ntasks); [ "$v" = "$ntasks" ] || fail "$run: slurm_ntasks \"$v\", expected $ntasks"
  v=$(h5attr "$run" /provenance/slurm_job_nodelist); [ "$v" = "$(hostname -s)" ] || fail "$run: slurm_job_nodelist \"$v\""
  v=$(h5attr "$run" /provenance/slurm_tasks_per_node); [ "$v" = "$ntasks" ] || fail "$run: slurm_tasks_per_node \"$v\""
  v=$(h5attr "$run" /provenance/world_size); [ "$v" = "$ntasks" ] || fail "$run: world_size \"$v\", expected $ntasks"
  echo "ok: $run completed, provenance slurm_job_id=$job slurm_ntasks=$ntasks nodelist=$(hostname -s)"
}

case "$case_name" in
  ddp_2cpu)
    # CI-sized: the tiny preset, one CPU per rank, run and log in the work directory.
    job=$(LORABENCH_INPUT=inputs/tiny.ini LORABENCH_SET="run.output_dir=$work/outputs run.steps=4" \
          sbatch --parsable --cpus-per-task=1 --time=4 --output="$work/job-%j.out" slurm/ddp_2cpu.sbatch)
    echo "submitted slurm/ddp_2cpu.sbatch: job $job"
    rc=0
    "$src/scripts/slurm/wait_job.sh" "$job" 240 || rc=$?
    cat "$work/job-$job.out"
    [ $rc -eq 0 ] || fail "job $job exited with $rc"
    check_run "$work/outputs/ddp_$job/run.h5" "$job" 2
    v=$(h5attr "$work/outputs/ddp_$job/run.h5" /metrics/summary/strategy); [ "$v" = ddp ] || fail "strategy \"$v\""
    v=$(h5attr "$work/outputs/ddp_$job/run.h5" /provenance/threads_per_rank); [ "$v" = 1 ] || fail "threads_per_rank \"$v\""
    expect_in "$work/job-$job.out" "rank 1/2"
    ;;
  preempt)
    # Preemption as Slurm does it: a running 2-rank job gets SIGUSR1 (scancel --signal=USR1, what
    # --signal=USR1@120 sends before the time limit) and then SIGTERM. Every rank finishes its step and
    # writes one checkpoint, lorabench exits 75, the batch script requeues the job, and the requeued job
    # (same id, same run directory) resumes by itself: the losses of both parts are bit-identical to an
    # uninterrupted job's, and so is the adapter.
    sets="run.output_dir=$work/outputs run.steps=60 run.warmup_steps=0 run.log_every=1 parallel.strategy=zero2"
    ref=$(LORABENCH_INPUT=inputs/tiny.ini LORABENCH_SET="$sets" \
          sbatch --parsable --cpus-per-task=1 --time=4 --output="$work/ref-%j.out" slurm/zero_2cpu.sbatch)
    job=$(LORABENCH_INPUT=inputs/tiny.ini LORABENCH_SET="$sets" \
          sbatch --parsable --cpus-per-task=1 --time=4 --output="$work/job-%j.out" slurm/zero_2cpu.sbatch)
    echo "submitted slurm/zero_2cpu.sbatch twice: job $ref (uninterrupted), job $job (signalled)"
    rc=0
    "$src/scripts/slurm/wait_job.sh" "$ref" 200 || rc=$?
    cat "$work/ref-$ref.out"
    [ $rc -eq 0 ] || fail "job $ref exited with $rc"
    # Signal once the job has run a few steps (the node runs one job at a time: the ref went first).
    end=$(( $(date +%s) + 120 ))
    until grep -q "^step 10/60" "$work/job-$job.out" 2>/dev/null; do
      [ "$(date +%s)" -lt "$end" ] || { cat "$work/job-$job.out" >&2; fail "job $job never reached step 10"; }
      sleep 0.1
    done
    scancel --signal=USR1 "$job"
    sleep 0.3
    # The second signal is meant to land during the checkpoint write (e2e_checkpoint_preempt does that
    # deterministically). When the ranks were faster, the job is already being requeued and Slurm refuses
    # to signal it ("Job can not be altered now"); the rest of the test holds either way.
    scancel --signal=TERM "$job" || echo "scancel --signal=TERM $job refused (exit $?): the job had already stopped and was being requeued"
    rc=0
    "$src/scripts/slurm/wait_job.sh" "$job" 200 || rc=$?
    cat "$work/job-$job.out"
    [ $rc -eq 0 ] || fail "job $job exited with $rc"
    restarts=$(scontrol -o show job "$job" | grep -oP '(^| )Restarts=\K[0-9]+')
    [ "$restarts" = 1 ] || fail "job $job: Restarts=$restarts, expected 1 (requeued once)"
    expect_in "$work/job-$job.out" "SIGUSR1: stopping after this step with a checkpoint"
    expect_in "$work/job-$job.out" "requeueing (restart 1)"
    d="$work/outputs/zero2_$job"
    check_run "$d/run.h5" "$job" 2
    v=$(h5attr "$d/run.1.h5" /status); [ "$v" = preempted ] || fail "$d/run.1.h5: status \"$v\""
    v=$(h5attr "$d/run.1.h5" /status_message)
    [[ "$v" == "stopped by SIGUSR1 after "*" of 60 steps; checkpoint "* ]] || fail "$d/run.1.h5: status_message \"$v\""
    v=$(h5attr "$d/run.h5" /provenance/resumed_at_step); [ -n "$v" ] && [ "$v" -gt 0 ] || fail "resumed_at_step \"$v\""
    "$run_checker" losses "$work/outputs/zero2_$ref/run.h5" "$d/run.1.h5" 0
    "$run_checker" losses "$work/outputs/zero2_$ref/run.h5" "$d/run.h5" 0
    cmp "$work/outputs/zero2_$ref/adapter/adapter_model.safetensors" "$d/adapter/adapter_model.safetensors" ||
      fail "the adapters of the uninterrupted and the requeued job differ"
    echo "ok: job $job stopped after a checkpoint, was requeued once and resumed at step $v bit-identically"
    ;;
  srun_fsdp)
    # `srun -n 2 lorabench inputs/fsdp.ini` inside an allocation; plain srun relies on MpiDefault=pmix.
    timeout 300 salloc -n 2 --cpus-per-task=1 --time=4 --job-name=lorabench-srun-fsdp \
      srun -n 2 "$lorabench" inputs/fsdp.ini --set model.preset=tiny --set model.dtype=fp32 \
      --set data.seq_len=32 --set run.steps=3 --set run.warmup_steps=1 --set lora.r=4 --set lora.alpha=8 \
      --set profile.peak_gflops=50 --set run.output_dir="$work/outputs" --set run.name=fsdp_srun \
      >"$work/salloc.txt" 2>&1 || { cat "$work/salloc.txt" >&2; fail "salloc/srun failed"; }
    cat "$work/salloc.txt"
    job=$(grep -oP 'Granted job allocation \K[0-9]+' "$work/salloc.txt") || fail "no job id in salloc's output"
    check_run "$work/outputs/fsdp_srun/run.h5" "$job" 2
    v=$(h5attr "$work/outputs/fsdp_srun/run.h5" /metrics/summary/strategy); [ "$v" = fsdp ] || fail "strategy \"$v\""
    ;;
  memory)
    # tiny fits in the address-space limit below, qwen2.5-0.5b in fp32 does not (its weights alone add
    # ~2 GB): libtorch's allocation fails during init, the job fails, and the summary records it. Slurm
    # propagates the submitting shell's limits to the job (PropagateResourceLimits=ALL). The limit is the
    # tiny run's own VmPeak + 1 GB, measured here: the mapped libraries alone differ by GBs between a
    # CUDA build (libtorch_cuda, cuBLAS, cuDNN: tiny ~3.2 GB, 0.5b ~5.2 GB) and a CPU-only one.
    tiny_peak_kb() {
      "$lorabench" "$src/inputs/tiny.ini" --set run.steps=2 --set run.warmup_steps=1 --set parallel.strategy=single \
        --set run.output_dir="$work/vmpeak" --set run.name=tiny >"$work/vmpeak.txt" 2>&1 &
      # VmPeak only grows: the last reading before the process ends is its peak.
      local pid=$! peak=0 v
      while kill -0 "$pid" 2>/dev/null; do
        v=$(awk '/^VmPeak/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
        [ -n "$v" ] && peak=$v
        sleep 0.05
      done
      wait "$pid" || { cat "$work/vmpeak.txt" >&2; fail "the tiny run that sizes the limit failed"; }
      echo "$peak"
    }
    limit_kb=${LORABENCH_TEST_AS_LIMIT_KB:-$(( $(tiny_peak_kb) + 1000000 ))}
    echo "address-space limit: $limit_kb KB"
    # No kind given: the cluster has no GPU, so the CPU scripts (the script says so).
    out=$( (ulimit -v "$limit_kb"
            MATRIX_PRESETS="tiny qwen2.5-0.5b" MATRIX_STRATEGIES="ddp" MATRIX_STEPS=2 LORABENCH_OUTPUT_DIR="$work/outputs" \
            LORABENCH_INPUT=inputs/tiny.ini LORABENCH_SBATCH_ARGS="--cpus-per-task=1 --time=4" slurm/memory_matrix.sh) 2>&1 )
    echo "$out"
    grep -q "kind cpu: no node of this cluster offers a GPU" <<<"$out" || fail "memory_matrix did not choose the CPU scripts"
    summary_job=$(awk '/^jobs:/ { print $NF }' <<<"$out")
    [ -n "$summary_job" ] || fail "no job ids printed"
    rc=0
    "$src/scripts/slurm/wait_job.sh" "$summary_job" 280 || rc=$?
    dir=$(ls -d "$work"/outputs/memory_*)
    cat "$dir"/summary-*.out || true
    [ $rc -eq 0 ] || fail "summary job $summary_job exited with $rc"
    tsv="$dir/summary.tsv"
    [ "$(wc -l <"$tsv")" -eq 3 ] || fail "$tsv: expected a header and 2 rows"
    awk -F'\t' '$1 == "tiny" && $2 == "ddp" && $5 == "COMPLETED" && $7 == "completed" && $9 > 0 { ok = 1 }
                END { exit !ok }' "$tsv" || { cat "$tsv" >&2; fail "tiny/ddp is not a completed row with a peak"; }
    awk -F'\t' '$1 == "qwen2.5-0.5b" && $2 == "ddp" && $5 != "COMPLETED" && $12 ~ /out of memory/ { ok = 1 }
                END { exit !ok }' "$tsv" || { cat "$tsv" >&2; fail "qwen2.5-0.5b/ddp is not an out-of-memory row"; }
    expect_in "$dir/summary.md" "| preset | strategy |"
    echo "ok: the matrix recorded a completed run and an out-of-memory failure"
    ;;
  matrix)
    # slurm/submit_matrix.sh as documented, without a kind (no GPU here: the CPU scripts). One run is
    # cancelled before it can write its run file: the report job still runs, reports the other three and
    # says why the fourth is missing (state, exit code, log), and fails.
    out=$(LORABENCH_INPUT=inputs/tiny.ini LORABENCH_SET="run.steps=2 run.warmup_steps=0 run.quiet=true" \
          LORABENCH_OUTPUT_DIR="$work/outputs" LORABENCH_SBATCH_ARGS="--cpus-per-task=1 --time=4" \
          slurm/submit_matrix.sh 2>&1)
    echo "$out"
    grep -q "kind cpu: no node of this cluster offers a GPU" <<<"$out" || fail "submit_matrix did not choose the CPU scripts"
    read -r -a jobs <<<"$(awk '/^jobs:/ { $1 = ""; print }' <<<"$out")"
    [ ${#jobs[@]} -eq 5 ] || fail "expected 4 run jobs and a report job, got: ${jobs[*]}"
    scancel "${jobs[2]}"   # fsdp_2cpu
    rc=0
    "$src/scripts/slurm/wait_job.sh" "${jobs[4]}" 280 || rc=$?
    report="$work/outputs/report_${jobs[0]}.md"
    [ -f "$report" ] || fail "no report $report"
    [ $rc -eq 1 ] || { cat "$report" >&2; fail "the report job exited with $rc, expected 1 (a run is missing)"; }
    expect_in "$report" "## Missing runs"
    expect_re "$report" "fsdp_${jobs[2]}/run.h5: no run file: job ${jobs[2]} CANCELLED"
    for k in 0 1 3; do
      check_run "$work/outputs/$(sed -n "$((k + 1))p" <<<"single
ddp
fsdp
zero2")_${jobs[$k]}/run.h5" "${jobs[$k]}" "$([ $k -eq 0 ] && echo 1 || echo 2)"
    done
    echo "ok: the report covers three runs and says why the cancelled one is missing"
    ;;
  *) fail "unknown case $case_name" ;;
esac
echo "ok: $case_name"
