#!/usr/bin/env bash
# Stops the two-node cluster of scripts/slurm/slurm_up_2node.sh and removes its nodes: cancels its jobs,
# stops both slurmds, slurmctld and munged by the PIDs in BASE/run (TERM, then KILL after 15 s), then ends
# every process still inside a node's namespaces (leftover job steps and ranks), and last the node's holder
# process, which takes the namespaces, the veth pair and the node's scratch mount with it.
# A PID is signalled only while it still is what it was recorded as: the daemon's program name, or for a
# node a process inside the network namespace recorded at start-up; a stale pid file never hits an
# unrelated process.
#   scripts/slurm/slurm_down_2node.sh [BASE]   # exit 0 when nothing of this cluster is left
set -u
PATH=$PATH:/usr/sbin:/sbin
BASE=${1:-${SLURM_BASE:-${TMPDIR:-/tmp}/lorabench-slurm2-$(id -u)}}
conf="$BASE/slurm.conf"
NODES=(lbnode0 lbnode1)

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# holder NODE: the PID of the node's namespace holder, when it still holds the recorded network namespace.
holder() {
  local pf="$BASE/run/ns-$1.pid" nf="$BASE/run/ns-$1.net" pid
  [ -s "$pf" ] && [ -s "$nf" ] || return 1
  pid=$(cat "$pf")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" = "$(cat "$nf")" ] || return 1
  echo "$pid"
}
# in_netns NS: the PIDs of every process whose network namespace is NS (net:[inode]).
in_netns() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(readlink "$d/ns/net" 2>/dev/null)" = "$1" ] && echo "${d#/proc/}"
  done
}

# Jobs first, while slurmctld and the slurmds can still end their steps. Clients run on lbnode0, where
# slurmctld listens.
if [ -f "$conf" ] && h0=$(holder "${NODES[0]}") && alive "$BASE/run/slurmctld.pid" slurmctld >/dev/null; then
  ctl() { SLURM_CONF=$conf nsenter -t "$h0" -n -u -- "$@"; }
  jobs=$(ctl squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    # shellcheck disable=SC2086
    ctl scancel $jobs 2>/dev/null
    for _ in $(seq 1 40); do
      [ -z "$(ctl squeue -h -t R,CG,PD -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
fi

rc=0
stop_daemons slurm_down_2node "$BASE" "slurmd-${NODES[0]}:slurmd" "slurmd-${NODES[1]}:slurmd" slurmctld:slurmctld \
  munged:munged || rc=1

# The nodes: whatever still runs inside them (job steps, ranks), then the holder.
for n in "${NODES[@]}"; do
  h=$(holder "$n") || { rm -f "$BASE/run/ns-$n.pid"; continue; }
  ns=$(cat "$BASE/run/ns-$n.net")
  left=$(in_netns "$ns" | grep -vx "$h" | tr '\n' ' ')
  if [ -n "${left// /}" ]; then
    echo "slurm_down_2node: $n: ending processes left in its namespaces: $left"
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null
  fi
  stop_pid "$h" || { echo "slurm_down_2node: $n namespace holder ($h) did not stop" >&2; rc=1; }
  for _ in $(seq 1 50); do
    [ -z "$(in_netns "$ns")" ] && break
    sleep 0.1
  done
  if [ -n "$(in_netns "$ns")" ]; then
    echo "slurm_down_2node: $n: processes still in $ns: $(in_netns "$ns" | tr '\n' ' ')" >&2
    rc=1
  else
    echo "slurm_down_2node: $n: namespaces, veth end and scratch mount gone"
    rm -f "$BASE/run/ns-$n.pid" "$BASE/run/ns-$n.net"
  fi
done

remove_munge_socket_dir "$BASE" munge2
exit $rc
