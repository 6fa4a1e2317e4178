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
