#!/usr/bin/env bash
# Commands for the nodes of scripts/slurm/slurm_up_2node.sh's cluster (BASE as given to it):
#   slurm_2node.sh BASE exec NODE CMD...   CMD on NODE (lbnode0, lbnode1): inside its network, UTS and mount
#                                          namespaces, in the current directory, with SLURM_CONF set. Clients
#                                          (sbatch, srun, squeue, scontrol) belong on lbnode0, where slurmctld is.
#   slurm_2node.sh BASE crash NODE         a node failure: SIGKILL to every process of NODE (its slurmd, job
#                                          steps, ranks; on lbnode0 also slurmctld); the node itself (its
#                                          namespaces, addresses, scratch) stays, like a machine that reboots
#   slurm_2node.sh BASE restart NODE       starts NODE's slurmd again (and slurmctld on lbnode0 when it is not
#                                          running); waits until the node is idle
#   slurm_2node.sh BASE pids NODE          the PIDs of NODE's processes other than its holder, one per line
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin
[ $# -ge 3 ] || { echo "usage: slurm_2node.sh BASE exec|crash|restart|pids NODE [CMD...]" >&2; exit 2; }
BASE=$1 cmd=$2 node=$3
shift 3
die() { echo "slurm_2node: $*" >&2; exit 1; }
case "$node" in lbnode0 | lbnode1) ;; *) die "unknown node \"$node\" (lbnode0, lbnode1)" ;; esac
pf="$BASE/run/ns-$node.pid" nf="$BASE/run/ns-$node.net"
[ -s "$pf" ] && [ -s "$nf" ] || die "$node is not up under $BASE (scripts/slurm/slurm_up_2node.sh $BASE)"
holder=$(cat "$pf")
ns=$(cat "$nf")
[ "$(readlink "/proc/$holder/ns/net" 2>/dev/null)" = "$ns" ] || die "$node's namespaces are gone (holder $holder)"
export SLURM_CONF="$BASE/slurm.conf"
on() { nsenter -t "$(cat "$BASE/run/ns-$1.pid")" -n -u -m -r --wd="$PWD" -- "${@:2}"; }
node_pids() {
  local d
  for d in /proc/[0-9]*; do
    [ "${d#/proc/}" != "$holder" ] && [ "$(readlink "$d/ns/net" 2>/dev/null)" = "$ns" ] && echo "${d#/proc/}"
  done
  return 0
}

case "$cmd" in
  exec)
    [ $# -ge 1 ] || die "exec: no command"
    exec nsenter -t "$holder" -n -u -m -r --wd="$PWD" -- "$@"
    ;;
  pids) node_pids ;;
  crash)
    pids=$(node_pids | tr '\n' ' ')
    [ -n "${pids// /}" ] || die "$node runs nothing"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    for _ in $(seq 1 50); do [ -z "$(node_pids)" ] && break; sleep 0.1; done
    [ -z "$(node_pids)" ] || die "$node: still running after SIGKILL: $(node_pids | tr '\n' ' ')"
    echo "slurm_2node: $node crashed (SIGKILL to $pids)"
    ;;
  restart)
    if [ "$node" = lbnode0 ] && ! on lbnode0 scontrol ping >/dev/null 2>&1; then
      on lbnode0 slurmctld -f "$SLURM_CONF" || die "slurmctld did not start"
    fi
    on "$node" slurmd -f "$SLURM_CONF" -N "$node" || die "slurmd of $node did not start"
    state=""
    for _ in $(seq 1 240); do
      state=$(on lbnode0 sinfo -h -n "$node" -o %T 2>/dev/null || true)
      [ "$state" = idle ] && break
      sleep 0.25
    done
    [ "$state" = idle ] || die "$node is \"$state\" after its restart, not idle"
    echo "slurm_2node: $node is back (idle)"
    ;;
  *) die "unknown command \"$cmd\" (exec, crash, restart, pids)" ;;
esac
