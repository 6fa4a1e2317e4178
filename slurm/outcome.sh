# shellcheck shell=bash
# Sourced by slurm/submit_matrix.sh, slurm/memory_matrix.sh and slurm/report.sbatch (not a job itself):
# what the cluster has, and what became of a job whose run file is missing.

# matrix_kind [ARG]: ARG when given (gpu|cpu), else gpu when any node of the cluster offers a gpu gres
# (sinfo's %G), else cpu. Says on stderr which it chose and why.
matrix_kind() {
  if [ -n "${1:-}" ]; then
    echo "$1"
    return
  fi
  local gres
  gres=$(sinfo -h -o %G 2>/dev/null | tr '\n' ' ' || true)
  if grep -q 'gpu' <<<"$gres"; then
    echo "kind gpu: the cluster's nodes offer GPUs (sinfo gres: ${gres% }); pass cpu to use the CPU scripts" >&2
    echo gpu
  else
    echo "kind cpu: no node of this cluster offers a GPU (sinfo gres: ${gres:-none}); pass gpu to override" >&2
    echo cpu
  fi
}

# job_outcome ID: prints "STATE<TAB>EXIT" of a finished job (sacct when accounting is on, else scontrol;
# EXIT is CODE:SIGNAL).
job_outcome() {
  local st="" ec=""
  if command -v sacct >/dev/null 2>&1; then
    local line
    line=$(sacct -n -X -P -j "$1" -o State,ExitCode 2>/dev/null | head -n 1 || true)
    st=${line%%|*}
    ec=${line#*|}
    st=${st%% *}   # "CANCELLED by 0" -> CANCELLED
    [ "$line" = "$st" ] && ec=""
  fi
  if [ -z "$st" ]; then
    local info
    info=$(scontrol -o show job "$1" 2>/dev/null || true)
    st=$(grep -oP '(^| )JobState=\K\S+' <<<"$info" || true)
    ec=$(grep -oP '(^| )ExitCode=\K\S+' <<<"$info" || true)
  fi
  printf '%s\t%s\n' "${st:-UNKNOWN}" "${ec:-?}"
}

# job_log ID: the job's standard output file (scontrol's StdOut while the controller knows the job, else
# the slurm/*.sbatch default outputs/slurm-<name>-<id>.out); empty when none is found.
job_log() {
  local f
  f=$(scontrol -o show job "$1" 2>/dev/null | grep -oP '(^| )StdOut=\K\S+' || true)
  [ -n "$f" ] && [ -f "$f" ] || f=$(ls outputs/slurm-*-"$1".out 2>/dev/null | head -n 1 || true)
  echo "$f"
}

# missing_run_reason ID [LOG]: one line saying why job ID left no run file: its state and exit code, its
# log, and the log's last error line (or its last line).
missing_run_reason() {
  local outcome state ec log last=""
  outcome=$(job_outcome "$1")
  state=${outcome%%$'\t'*}
  ec=${outcome#*$'\t'}
  log=${2:-$(job_log "$1")}
  if [ -n "$log" ] && [ -f "$log" ]; then
    last=$(grep -iE 'error|fail|killed|out of memory|cancelled' "$log" | tail -n 1 || true)
    [ -n "$last" ] || last=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 || true)
    last=$(tr '\t|' ' /' <<<"$last" | cut -c1-160)
  fi
  echo "no run file: job $1 $state (exit $ec); log ${log:-not found}${last:+: $last}"
}
