#!/usr/bin/env bash
# Stops the cluster of scripts/slurm/slurm_up.sh: cancels its jobs, then stops slurmd, slurmctld and
# munged by the PIDs in BASE/run (TERM, then KILL after 15 s). A PID is signalled only while it still
# names the expected program, so a stale pid file never hits an unrelated process.
#   scripts/slurm/slurm_down.sh [BASE]        # exit 0 when nothing of this cluster is left running
set -u
PATH=$PATH:/usr/sbin
BASE=${1:-${SLURM_BASE:-${TMPDIR:-/tmp}/lorabench-slurm-$(id -u)}}
conf="$BASE/slurm.conf"

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Jobs first, while slurmctld and slurmd can still end their steps (slurmstepd and the ranks).
if [ -f "$conf" ] && alive "$BASE/run/slurmctld.pid" slurmctld >/dev/null; then
  jobs=$(SLURM_CONF=$conf squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    # shellcheck disable=SC2086
    SLURM_CONF=$conf scancel $jobs 2>/dev/null
    for _ in $(seq 1 60); do
      [ -z "$(SLURM_CONF=$conf squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
fi

rc=0
stop_daemons slurm_down "$BASE" slurmd:slurmd slurmctld:slurmctld munged:munged || rc=1
# munged's socket directory when slurm_up.sh had to put it outside BASE (see lib.sh).
remove_munge_socket_dir "$BASE" munge
exit $rc
