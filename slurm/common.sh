# shellcheck shell=bash
# Sourced by the slurm/*.sbatch scripts (docs/slurm.md); not a job itself. Submit from the repository
# root: every path is relative to $SLURM_SUBMIT_DIR. Sets
#   LB_BIN   the lorabench binary: $LORABENCH_BIN, else build/src/app/lorabench, else `lorabench` on PATH
#   LB_MPI   srun's PMI plugin: $LORABENCH_SRUN_MPI, default pmix (Debian's Open MPI needs pmix; pmi2 fails)
#   LB_SETS  extra --set arguments from $LORABENCH_SET ("key=value key=value", no spaces inside a value);
#            they come last on the command line, so they override the script's own --set
#   LB_OUTPUT_DIR  run.output_dir from $LORABENCH_SET, else outputs (what inputs/*.ini use): where
#            `lorabench doctor --output-dir` checks that every node sees the run directory
# and exports OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = --cpus-per-task, so the OpenMP and OpenBLAS pools
# match parallel.threads_per_rank (lorabench doctor warns when OPENBLAS_NUM_THREADS is unset).
cd "$SLURM_SUBMIT_DIR" || exit 2

if [ -n "${LORABENCH_BIN:-}" ]; then
  LB_BIN=$LORABENCH_BIN
elif [ -x "$SLURM_SUBMIT_DIR/build/src/app/lorabench" ]; then
  LB_BIN=$SLURM_SUBMIT_DIR/build/src/app/lorabench
else
  LB_BIN=$(command -v lorabench) || {
    echo "lorabench not found: build it into build/ (cmake -S . -B build), set LORABENCH_BIN, or put it on PATH" >&2
    exit 2
  }
fi
[ -x "$LB_BIN" ] || { echo "LORABENCH_BIN=$LB_BIN is not an executable" >&2; exit 2; }

LB_MPI=${LORABENCH_SRUN_MPI:-pmix}
LB_SETS=()
read -r -a _lb_kv <<<"${LORABENCH_SET:-}"
LB_OUTPUT_DIR=outputs
for _kv in "${_lb_kv[@]}"; do
  LB_SETS+=(--set "$_kv")
  case "$_kv" in run.output_dir=*) LB_OUTPUT_DIR=${_kv#run.output_dir=} ;; esac
done
unset _lb_kv _kv

export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export OPENBLAS_NUM_THREADS=$OMP_NUM_THREADS
echo "job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST}: ${SLURM_NTASKS:-1} tasks (${SLURM_TASKS_PER_NODE:-1} per node)," \
     "${SLURM_CPUS_PER_TASK:-1} CPUs per task; $LB_BIN; srun --mpi=$LB_MPI; extra: ${LORABENCH_SET:-none}"

# lb_run_requeueable COMMAND...: runs the training step and requeues this job when lorabench stopped on a
# signal after writing its checkpoint (exit 75: `#SBATCH --signal=USR1@120` before the time limit,
# `scancel --signal=USR1 JOB`, preemption's SIGTERM; docs/slurm.md, "Time limits, preemption and requeue").
# The requeued job keeps its id, so run.name (NAME_<job id>) and checkpoint.resume=auto continue the same
# run directory from its latest checkpoint. Any other exit code is the job's. LORABENCH_MAX_REQUEUES
# (default 20) bounds the restarts; LORABENCH_REQUEUE=0 leaves a stopped job stopped (exit 75).
lb_run_requeueable() {
  # Preemption and the time limit also send SIGTERM to this shell: it must outlive srun to requeue.
  trap 'echo "job ${SLURM_JOB_ID}: the batch shell got SIGTERM; waiting for the ranks to checkpoint"' TERM
  local rc=0
  "$@" || rc=$?
  trap - TERM
  [ "$rc" -eq 75 ] || return "$rc"
  local restarts=${SLURM_RESTART_COUNT:-0} max=${LORABENCH_MAX_REQUEUES:-20}
  if [ "${LORABENCH_REQUEUE:-1}" != 1 ]; then
    echo "job ${SLURM_JOB_ID}: lorabench stopped after a checkpoint (exit 75); LORABENCH_REQUEUE=0: not requeued"
    return 75
  fi
  if [ "$restarts" -ge "$max" ]; then
    echo "job ${SLURM_JOB_ID}: lorabench stopped after a checkpoint (exit 75), but the job was already requeued" \
         "$restarts times (LORABENCH_MAX_REQUEUES=$max): not requeued" >&2
    return 75
  fi
  echo "job ${SLURM_JOB_ID}: lorabench stopped after a checkpoint (exit 75): requeueing (restart $((restarts + 1)));" \
       "the job resumes from the checkpoint (checkpoint.resume=auto)"
  # Slurm ends this script when it requeues the job; reaching the next line means it refused.
  scontrol requeue "$SLURM_JOB_ID" || { echo "job ${SLURM_JOB_ID}: scontrol requeue failed" >&2; return 75; }
  sleep 60
  echo "job ${SLURM_JOB_ID}: still running 60 s after scontrol requeue" >&2
  return 75
}
