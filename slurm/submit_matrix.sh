#!/usr/bin/env bash
# Submits the strategy matrix (single, ddp, fsdp, zero2) as four jobs, then a report job that runs
# lorabench-report over their run files once all of them have ended (--dependency=afterany:...): a run
# that failed is left out of the report, which says why (the job's state, exit code and log) and makes the
# report job fail. Run it on a login node, from the repository root (docs/slurm.md):
#   slurm/submit_matrix.sh            # what the cluster has: GPU scripts when its nodes offer GPUs (sinfo)
#   slurm/submit_matrix.sh gpu        # GPU scripts: single_gpu, ddp_2gpu, fsdp_2gpu, zero_2gpu
#   slurm/submit_matrix.sh cpu        # CPU scripts: single_cpu, ddp_2cpu, fsdp_2cpu, zero_2cpu
# Environment:
#   LORABENCH_SBATCH_ARGS   options for every sbatch, e.g. "-p gpu -A myproject" (space-separated)
#   LORABENCH_OUTPUT_DIR    where the runs and the report go (default outputs; passed as run.output_dir)
#   LORABENCH_INPUT, LORABENCH_SET, LORABENCH_BIN, LORABENCH_REPORT_BIN: passed on to the jobs
#     (LORABENCH_INPUT replaces each script's own input; strategies still come from the scripts)
# Prints the job ids, the run files and the report's path; exits once everything is submitted.
set -euo pipefail
case "${1:-}" in "" | gpu | cpu) ;; *) echo "usage: slurm/submit_matrix.sh [gpu|cpu]" >&2; exit 2 ;; esac
[ -f slurm/common.sh ] || { echo "submit_matrix: run it from the repository root" >&2; exit 2; }
# shellcheck source=outcome.sh
source slurm/outcome.sh
kind=$(matrix_kind "${1:-}")
case "$kind" in
  gpu) scripts=(single_gpu ddp_2gpu fsdp_2gpu zero_2gpu) ;;
  cpu) scripts=(single_cpu ddp_2cpu fsdp_2cpu zero_2cpu) ;;
esac
strategies=(single ddp fsdp zero2)   # the run names the scripts give: <strategy>_<job id>
case " ${LORABENCH_SET:-} " in
  *" run.output_dir="* | *" run.name="*)
    echo "submit_matrix: set LORABENCH_OUTPUT_DIR instead of run.output_dir/run.name in LORABENCH_SET" >&2
    exit 2 ;;
esac

outdir=${LORABENCH_OUTPUT_DIR:-outputs}
mkdir -p "$outdir" outputs   # outputs/: the scripts' --output logs
export LORABENCH_SET="run.output_dir=$outdir ${LORABENCH_SET:-}"
read -r -a sbatch_args <<<"${LORABENCH_SBATCH_ARGS:-}"

ids=()
runs=()
for i in "${!scripts[@]}"; do
  out=$(sbatch --parsable "${sbatch_args[@]}" "slurm/${scripts[$i]}.sbatch")
  id=${out%%;*}   # "id;cluster" on multi-cluster sites
  ids+=("$id")
  runs+=("$outdir/${strategies[$i]}_$id/run.h5")
  echo "submitted ${scripts[$i]}: job $id -> ${runs[-1]}"
done

deps=$(IFS=:; echo "${ids[*]}")
export LORABENCH_REPORT="$outdir/report_${ids[0]}.md"
export LORABENCH_RUN_JOBS="${ids[*]}"   # report.sbatch: which job wrote which run file
out=$(sbatch --parsable "${sbatch_args[@]}" --dependency="afterany:$deps" slurm/report.sbatch "${runs[@]}")
rid=${out%%;*}
echo "submitted report: job $rid (after $deps) -> $LORABENCH_REPORT"
echo "jobs: ${ids[*]} $rid"
