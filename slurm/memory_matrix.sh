#!/usr/bin/env bash
# Memory-pressure matrix: model presets x strategies, one job each, then a summary job that records every
# outcome, out-of-memory and other failures included, as a row of a TSV and a Markdown table (a failed
# run is a result here, not a reason to stop). Run it on a login node, from the repository root
# (docs/slurm.md):
#   slurm/memory_matrix.sh [gpu|cpu]     # default: gpu when the cluster's nodes offer GPUs (sinfo), else cpu
#   MATRIX_PRESETS="tiny small" MATRIX_STRATEGIES="single ddp" slurm/memory_matrix.sh cpu
# Environment:
#   MATRIX_PRESETS      default "qwen2.5-0.5b qwen2.5-1.5b qwen2.5-3b qwen2.5-7b"
#   MATRIX_STRATEGIES   default "single ddp zero1 zero2 fsdp" (zero1 uses the zero_2* scripts)
#   MATRIX_STEPS        steps per run (default 4: the peaks are reached in the first steps)
#   LORABENCH_SBATCH_ARGS, LORABENCH_OUTPUT_DIR (default outputs), LORABENCH_INPUT, LORABENCH_SET,
#   LORABENCH_BIN: as for slurm/submit_matrix.sh
# Everything lands in OUTPUT_DIR/memory_<tag>/: <preset>_<strategy>/run.h5, one log per job, manifest.tsv,
# and, written by the summary job, summary.tsv and summary.md with the columns
#   preset strategy ranks job state exit run_status verdict mem_peak_bytes rss_peak_bytes step_time_s note
# A row without a run file says why in its note: the job's state and exit code, its log and the log's last
# error line.
# state and exit come from sacct when accounting is on, else from scontrol (exit is CODE:SIGNAL; 137:0, a
# rank killed under srun, or 0:9 is a SIGKILL, which without cgroups is how the kernel's OOM killer shows).
#
#   slurm/memory_matrix.sh --summarize DIR   # the summary job's entry point (also usable by hand)
set -euo pipefail

# h5attr FILE OBJECT/NAME: an attribute's value as h5dump prints it, without quotes ("" when missing).
h5attr() {
  h5dump -a "$2" "$1" 2>/dev/null | sed -n 's/^ *(0): //p' | head -n 1 | tr -d '"' || true
}

# job_outcome, missing_run_reason, matrix_kind
# shellcheck source=outcome.sh
# (from the repository root: the summary job runs a spooled copy of this script, in $SLURM_SUBMIT_DIR)
[ -n "${SLURM_SUBMIT_DIR:-}" ] && cd "$SLURM_SUBMIT_DIR"
[ -f slurm/outcome.sh ] || { echo "memory_matrix: run it from the repository root" >&2; exit 2; }
source slurm/outcome.sh

# What an allocation failure prints: CUDA ("CUDA out of memory"), libtorch on the CPU ("DefaultCPUAllocator:
# can't allocate memory", "not enough memory"), C++ (std::bad_alloc), the kernel and Slurm (oom-kill).
oom_pattern="out of memory|can't allocate memory|cannot allocate memory|not enough memory|bad_alloc|oom-kill|oom_kill"

summarize() {
  local dir=$1
  local manifest="$dir/manifest.tsv" tsv="$dir/summary.tsv" md="$dir/summary.md"
  [ -f "$manifest" ] || { echo "memory_matrix: no $manifest" >&2; exit 2; }
  local cols="preset strategy ranks job state exit run_status verdict mem_peak_bytes rss_peak_bytes step_time_s note"
  tr ' ' '\t' <<<"$cols" >"$tsv"
  local sep="|" _
  for _ in $cols; do sep+=" --- |"; done
  printf '| %s |\n%s\n' "${cols// / | }" "$sep" >"$md"
  local preset strategy ranks job run log
  while IFS=$'\t' read -r preset strategy ranks job run log; do
    [ "$preset" = preset ] && continue
    local outcome state ec status="" verdict="" mem="" rss="" step="" note=""
    outcome=$(job_outcome "$job")
    state=${outcome%%$'\t'*}
    ec=${outcome#*$'\t'}
    if [ -f "$run" ]; then
      status=$(h5attr "$run" /status)
      verdict=$(h5attr "$run" /verdict)
      mem=$(h5attr "$run" /metrics/summary/mem_peak_bytes_max)
      rss=$(h5attr "$run" /metrics/summary/rss_peak_bytes_max)
      step=$(h5attr "$run" /metrics/summary/step_time_mean_s)
      [ "$status" = failed ] && note=$(h5attr "$run" /status_message | tr '\t\n|' '  /' | cut -c1-120)
    else
      status="no run file"
      note=$(missing_run_reason "$job" "$log")
      note=${note#no run file: }
    fi
    if [ "$state" = OUT_OF_MEMORY ] || grep -qiE "$oom_pattern" "$log" 2>/dev/null; then
      note="out of memory${note:+: $note}"
    elif [ "${ec#*:}" = 9 ] || [ "${ec%%:*}" = 137 ]; then   # the batch shell, or srun for a rank
      note="SIGKILL (without cgroups: likely the kernel OOM killer)${note:+: $note}"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$preset" "$strategy" "$ranks" "$job" "$state" "$ec" \
      "$status" "$verdict" "$mem" "$rss" "$step" "$note" >>"$tsv"
    echo "| $preset | $strategy | $ranks | $job | $state | $ec | $status | $verdict | $mem | $rss | $step | $note |" >>"$md"
  done <"$manifest"
  echo "memory_matrix: $tsv, $md"
  cat "$md"
}

if [ "${1:-}" = --summarize ]; then
  [ $# -eq 2 ] || { echo "usage: slurm/memory_matrix.sh --summarize DIR" >&2; exit 2; }
  summarize "$2"
  exit 0
fi

case "${1:-}" in "" | gpu | cpu) ;; *) echo "usage: slurm/memory_matrix.sh [gpu|cpu] | --summarize DIR" >&2; exit 2 ;; esac
[ -f slurm/common.sh ] || { echo "memory_matrix: run it from the repository root" >&2; exit 2; }
kind=$(matrix_kind "${1:-}")
case " ${LORABENCH_SET:-} " in
  *" run.output_dir="* | *" run.name="*)
    echo "memory_matrix: set LORABENCH_OUTPUT_DIR instead of run.output_dir/run.name in LORABENCH_SET" >&2
    exit 2 ;;
esac
read -r -a presets <<<"${MATRIX_PRESETS:-qwen2.5-0.5b qwen2.5-1.5b qwen2.5-3b qwen2.5-7b}"
read -r -a strategies <<<"${MATRIX_STRATEGIES:-single ddp zero1 zero2 fsdp}"
steps=${MATRIX_STEPS:-4}
read -r -a sbatch_args <<<"${LORABENCH_SBATCH_ARGS:-}"
user_set=${LORABENCH_SET:-}

dir="${LORABENCH_OUTPUT_DIR:-outputs}/memory_$(date +%Y%m%d-%H%M%S)_$$"
mkdir -p "$dir" outputs
manifest="$dir/manifest.tsv"
printf 'preset\tstrategy\tranks\tjob\trun\tlog\n' >"$manifest"
ids=()
for preset in "${presets[@]}"; do
  for strategy in "${strategies[@]}"; do
    case "$strategy" in
      single) script=single_$kind ranks=1 ;;
      ddp) script=ddp_2$kind ranks=2 ;;
      fsdp) script=fsdp_2$kind ranks=2 ;;
      zero1 | zero2) script=zero_2$kind ranks=2 ;;
      *) echo "memory_matrix: unknown strategy $strategy" >&2; exit 2 ;;
    esac
    name="${preset}_${strategy}"
    # The script's own --set come first; these override its strategy (zero1) and run name.
    out=$(LORABENCH_SET="run.output_dir=$dir run.name=$name run.steps=$steps run.warmup_steps=1 \
parallel.strategy=$strategy model.preset=$preset $user_set" \
          sbatch --parsable "${sbatch_args[@]}" --job-name="lbmem-$name" --output="$dir/$name-%j.out" \
                 "slurm/$script.sbatch")
    id=${out%%;*}
    ids+=("$id")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$preset" "$strategy" "$ranks" "$id" "$dir/$name/run.h5" "$dir/$name-$id.out" \
      >>"$manifest"
    echo "submitted $name: job $id"
  done
done

deps=$(IFS=:; echo "${ids[*]}")
# afterany: the summary runs whatever became of the runs, failures included.
out=$(sbatch --parsable "${sbatch_args[@]}" --dependency="afterany:$deps" --job-name=lbmem-summary \
             --ntasks=1 --cpus-per-task=1 --time=00:10:00 --output="$dir/summary-%j.out" \
             "$0" --summarize "$dir")
echo "submitted summary: job ${out%%;*} (after all ${#ids[@]} runs) -> $dir/summary.md"
echo "jobs: ${ids[*]} ${out%%;*}"
