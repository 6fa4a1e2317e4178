#!/usr/bin/env bash
# Stops the cluster of scripts/slurm/slurm_up.sh: cancels its jobs, then stops slurmd, slurmctld and
# munged by the PIDs in BASE/run (TERM, then KILL after 15 s). A PID is signalled only while it still
# names the expected program, so a stale pid file never hits an unrelated process.
#   scripts/slurm/slurm_down.sh [BASE]        # exit 0 when nothing of this cluster is left running
set -u
PATH=$PATH:/usr/sbin
BASE=${1:-${SLURM_BASE:-${TMPDIR:-/tmp}/lorabench-slurm-$(id -u)}}
conf="$BASE/slurm.conf"

# alive PIDFILE NAME: prints the PID when it runs and /proc/PID/comm is NAME.
alive() {
  [ -s "$1" ] || return 1
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
  echo "$pid"
}
# running PID: true while PID exists and is not a zombie waiting for its parent to reap it.
running() {
  local st
  st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

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
for d in slurmd slurmctld munged; do
  pf="$BASE/run/$d.pid"
  pid=$(alive "$pf" "$d") || { rm -f "$pf"; continue; }
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 150); do running "$pid" || break; sleep 0.1; done
  if running "$pid"; then
    kill -KILL "$pid" 2>/dev/null
    sleep 0.5
  fi
  if running "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$d" ]; then
    echo "slurm_down: $d ($pid) did not stop" >&2
    rc=1
  else
    echo "slurm_down: $d ($pid) stopped"
    rm -f "$pf"
  fi
done
# munged's socket directory when slurm_up.sh had to put it outside BASE (see there).
if [ -s "$BASE/munge/socket_dir" ]; then
  sock_dir=$(cat "$BASE/munge/socket_dir")
  case "$sock_dir" in
    "$BASE"/*) ;;
    */lorabench-munge-*) rm -rf "$sock_dir" ;;
  esac
fi
exit $rc
