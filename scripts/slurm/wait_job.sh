#!/usr/bin/env bash
# Waits for a Slurm job to end and exits with its exit code (scontrol only: no accounting database needed).
#   scripts/slurm/wait_job.sh JOBID [TIMEOUT_S]     (default timeout 600 s)
# Exit: 0 = COMPLETED; the job's exit code when it failed with one; 128+signal when a signal ended it;
# 1 for a failed state without either; 124 = still not finished at the timeout (the job keeps running).
# Prints "job JOBID STATE exit=CODE:SIGNAL" on stderr when the job did not complete.
set -u
[ $# -ge 1 ] || { echo "usage: wait_job.sh JOBID [TIMEOUT_S]" >&2; exit 2; }
job=$1
timeout=${2:-600}
end=$(( $(date +%s) + timeout ))
while [ "$(date +%s)" -lt "$end" ]; do
  info=$(scontrol -o show job "$job" 2>/dev/null)
  state=$(grep -oP '(^| )JobState=\K\S+' <<<"$info")
  case "$state" in
    COMPLETED) exit 0 ;;
    FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | BOOT_FAIL | DEADLINE)
      ec=$(grep -oP '(^| )ExitCode=\K[0-9]+:[0-9]+' <<<"$info")
      echo "job $job $state exit=${ec:-?}" >&2
      code=${ec%%:*}
      sig=${ec##*:}
      if [ "${sig:-0}" -gt 0 ] 2>/dev/null; then exit $((128 + sig)); fi
      if [ "${code:-0}" -gt 0 ] 2>/dev/null; then exit "$code"; fi
      exit 1
      ;;
    "")
      echo "job $job unknown to slurmctld (SLURM_CONF=${SLURM_CONF:-unset})" >&2
      exit 1
      ;;
  esac
  sleep 0.5
done
echo "job $job still ${state:-?} after ${timeout} s" >&2
exit 124
