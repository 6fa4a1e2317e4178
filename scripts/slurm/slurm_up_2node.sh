#!/usr/bin/env bash
# A two-node Slurm cluster on this machine, for trying multi-node runs without a cluster (docs/multinode.md)
# and for the ctest label multinode. Each node is a set of Linux namespaces held by one process:
#   network  its own interfaces: lo and "lbnet", one end of a veth pair whose other end is in the other
#            node (lbnode0 10.77.0.1/24, lbnode1 10.77.0.2/24); nothing else, so no traffic leaves them
#   UTS      its own host name (lbnode0, lbnode1): `hostname` differs, as MPI and lorabench see it
#   mount    private: a tmpfs at BASE/scratch that only this node sees (node-local scratch); everything else
#            (the repository, BASE, /tmp, /dev/shm) is the same file system on both nodes
# munged runs outside the namespaces (a Unix socket under BASE is all it offers); slurmctld runs on lbnode0
# (the "login node": run sbatch/srun/squeue there), one slurmd per node with its own NodeName and NodeAddr.
#
#   scripts/slurm/slurm_up_2node.sh [BASE]        # BASE default: ${TMPDIR:-/tmp}/lorabench-slurm2-<uid>
#   scripts/slurm/slurm_2node.sh BASE exec lbnode0 sbatch -N 2 ...   # any command on a node
#   scripts/slurm/slurm_down_2node.sh [BASE]      # stops everything, namespaces and veth included
#
# Needs root (network namespaces and veth pairs need CAP_NET_ADMIN), unshare and nsenter (util-linux), ip
# (iproute2), munge and slurm-wlm (scripts/install-deps.sh). Each node offers 2 CPUs (2 sockets x 1 core)
# and 1 GiB to Slurm, whatever the machine has: both nodes share this machine's cores.
# On any failure everything started so far is stopped again (slurm_down_2node.sh) and the exit code is 1;
# a cluster left under the same BASE is stopped first.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BASE=${1:-${SLURM_BASE:-${TMPDIR:-/tmp}/lorabench-slurm2-$(id -u)}}
PATH=$PATH:/usr/sbin:/sbin
NODES=(lbnode0 lbnode1)
ADDRS=(10.77.0.1 10.77.0.2)
IFACE=lbnet

die() { echo "slurm_up_2node: $*" >&2; exit 1; }
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "needs root: network namespaces and veth pairs need CAP_NET_ADMIN"
for b in unshare nsenter ip munged mungekey munge unmunge slurmctld slurmd sinfo scontrol; do
  command -v "$b" >/dev/null 2>&1 || die "$b not found: install util-linux, iproute2, munge and slurm-wlm (scripts/install-deps.sh)"
done

# A cluster left behind under this BASE: stop it by its pid files.
"$here/slurm_down_2node.sh" "$BASE" >/dev/null 2>&1 || true

started=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$started" -eq 0 ]; then
    echo "slurm_up_2node: failed; stopping what was started (logs: $BASE/log)" >&2
    tail -n 20 "$BASE"/log/*.log >&2 2>/dev/null || true
    "$here/slurm_down_2node.sh" "$BASE" >&2 || true
    [ "$rc" -ne 0 ] || rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

mkdir -p "$BASE"
chmod 0755 "$BASE"   # munged refuses directories that others may write
rm -rf "$BASE/state" "$BASE/run" "$BASE/log" "$BASE/scratch" "$BASE/munge/munge.socket"*
mkdir -p "$BASE/state/ctld" "$BASE/run" "$BASE/log" "$BASE/munge" "$BASE/scratch"
for n in "${NODES[@]}"; do mkdir -p "$BASE/state/d-$n" "$BASE/state/tmp-$n"; done
chmod 0755 "$BASE/run" "$BASE/log" "$BASE/munge"
chmod 0700 "$BASE/state"

# The nodes: one holder process each (sleep), in new network, UTS and mount namespaces. Everything a node
# runs is entered into the holder's namespaces with nsenter; when the last process of a node ends, its
# namespaces and its end of the veth pair go with it (no `ip netns` bind mounts, nothing in /run).
for i in 0 1; do
  n=${NODES[$i]}
  setsid unshare --net --uts --mount --propagation private -- bash -c '
    hostname "$1" && mount -t tmpfs -o size=2g,mode=0755 "lorabench-scratch-$1" "$2" &&
    echo $$ >"$3.tmp" && mv "$3.tmp" "$3" && exec sleep infinity' \
    holder "$n" "$BASE/scratch" "$BASE/run/ns-$n.pid" </dev/null >"$BASE/log/ns-$n.log" 2>&1 &
done
for i in 0 1; do
  pf="$BASE/run/ns-${NODES[$i]}.pid"
  for _ in $(seq 1 50); do [ -s "$pf" ] && break; sleep 0.1; done
  [ -s "$pf" ] || die "node ${NODES[$i]}: no namespaces (unshare --net --uts --mount failed: $(cat "$BASE/log/ns-${NODES[$i]}.log"))"
  pid=$(cat "$pf")
  readlink "/proc/$pid/ns/net" >"$BASE/run/ns-${NODES[$i]}.net"
done
P0=$(cat "$BASE/run/ns-${NODES[0]}.pid")
P1=$(cat "$BASE/run/ns-${NODES[1]}.pid")
on() {  # on NODE_INDEX CMD...: CMD inside that node's namespaces, in this directory
  local p
  p=$(cat "$BASE/run/ns-${NODES[$1]}.pid")
  shift
  nsenter -t "$p" -n -u -m -r --wd="$PWD" -- "$@"
}

# The link: created inside lbnode0 with its peer placed straight into lbnode1, so no end is ever in this
# machine's own network namespace.
on 0 ip link add "$IFACE" type veth peer name "$IFACE" netns "$P1" || die "cannot create a veth pair"
for i in 0 1; do
  on "$i" ip link set lo up
  on "$i" ip addr add "${ADDRS[$i]}/24" dev "$IFACE"
  on "$i" ip link set "$IFACE" up
done
ok=0
for _ in $(seq 1 50); do
  if on 0 ip -br addr show "$IFACE" | grep -q UP && on 1 ip -br addr show "$IFACE" | grep -q UP; then ok=1; break; fi
  sleep 0.1
done
[ "$ok" -eq 1 ] || die "the veth link did not come up"

start_munge "$BASE" munge2

write_cgroup_conf "$BASE"

USER_NAME=$(id -un)
FIRST_JOB_ID=$(( $(date +%s) % 60000000 + 1000 ))
# Each node has its own port space, so the default ports are free whatever runs on this machine.
# %n: slurmd's files per node (both slurmds share BASE). SlurmdTimeout is short so a node that is gone
# (slurm_2node.sh crash) is noticed within a test's time; config_overrides: the nodes are the layout
# declared here, not this machine's.
cat >"$BASE/slurm.conf" <<EOF
# Generated by scripts/slurm/slurm_up_2node.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ): two nodes in network
# namespaces joined by a veth pair, no cgroups, no accounting database.
ClusterName=lorabench-2node
SlurmctldHost=${NODES[0]}(${ADDRS[0]})
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=$USER_NAME
SlurmdUser=$USER_NAME
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK_DIR/munge.socket
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
FirstJobId=$FIRST_JOB_ID
MinJobAge=600
KillWait=5
SlurmdTimeout=15
MessageTimeout=5
StateSaveLocation=$BASE/state/ctld
SlurmdSpoolDir=$BASE/state/d-%n
TmpFS=$BASE/state/tmp-%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
NodeName=${NODES[0]} NodeAddr=${ADDRS[0]} NodeHostname=${NODES[0]} Sockets=2 CoresPerSocket=1 ThreadsPerCore=1 RealMemory=1024 State=UNKNOWN
NodeName=${NODES[1]} NodeAddr=${ADDRS[1]} NodeHostname=${NODES[1]} Sockets=2 CoresPerSocket=1 ThreadsPerCore=1 RealMemory=1024 State=UNKNOWN
PartitionName=debug Nodes=${NODES[0]},${NODES[1]} Default=YES MaxTime=INFINITE State=UP
EOF

export SLURM_CONF="$BASE/slurm.conf"
on 0 slurmctld -c -f "$SLURM_CONF" || die "slurmctld did not start"
for i in 0 1; do
  on "$i" slurmd -f "$SLURM_CONF" -N "${NODES[$i]}" || die "slurmd of ${NODES[$i]} did not start"
done
state=""
for _ in $(seq 1 160); do
  state=$(on 0 sinfo -h -N -o '%N=%T' 2>/dev/null | sort | tr '\n' ' ' || true)
  [ "$state" = "${NODES[0]}=idle ${NODES[1]}=idle " ] && break
  sleep 0.25
done
[ "$state" = "${NODES[0]}=idle ${NODES[1]}=idle " ] || die "the nodes are not idle: ${state:-no answer from slurmctld}"
started=1
echo "slurm_up_2node: cluster up under $BASE: ${NODES[0]} ${ADDRS[0]} (slurmctld, slurmd), ${NODES[1]} ${ADDRS[1]} (slurmd), interface $IFACE" >&2
echo "slurm_up_2node: run commands on a node with: $here/slurm_2node.sh $BASE exec ${NODES[0]} CMD..." >&2
echo "export SLURM_CONF=$SLURM_CONF"
