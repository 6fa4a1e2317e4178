# shellcheck shell=bash
# Sourced by scripts/slurm/slurm_up*.sh and slurm_down*.sh (not run): what the one-node and the two-node
# clusters do alike. The sourcing script defines die() (slurm_up) or uses the return codes (slurm_down).

# --- starting ---

# Slurm 22.05's slurmd loads a cgroup plugin even with proctrack/linuxproc and task/none, and its
# autodetection fails where /sys/fs/cgroup is no cgroup mount (containers, chroots). None of the plugins
# the clusters configure uses cgroups, so there the v1 plugin is named explicitly: it loads without a
# hierarchy. write_cgroup_conf BASE
write_cgroup_conf() {
  case "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null || true)" in
    cgroup2fs | tmpfs) rm -f "$1/cgroup.conf" ;;
    *) printf 'CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n' >"$1/cgroup.conf" ;;
  esac
}

# world_searchable DIR: everyone may search DIR and every directory above it.
world_searchable() {
  local d=$1 perm
  while [ "$d" != / ] && [ -n "$d" ]; do
    perm=$(stat -c %A "$d")
    case "${perm:9:1}" in x | t) ;; *) return 1 ;; esac
    d=$(dirname "$d")
  done
}

# start_munge BASE TAG: munged with a private key and socket, so the system's munged (if any) is neither
# needed nor disturbed; then a round trip through it. munged insists that everyone may search every
# directory above its socket. A BASE under a private home (/root is 0700 on a fresh Debian) is not, so the
# socket then lives in its own directory /tmp/lorabench-TAG-UID-HASH (remove_munge_socket_dir removes it).
# Sets SOCK_DIR; BASE/munge and BASE/run, BASE/log must exist.
start_munge() {
  local base=$1 tag=$2
  SOCK_DIR="$base/munge"
  if ! world_searchable "$base/munge"; then
    SOCK_DIR="${TMPDIR:-/tmp}/lorabench-$tag-$(id -u)-$(printf %s "$base" | cksum | cut -d' ' -f1)"
    world_searchable "$(dirname "$SOCK_DIR")" || die "no directory for munged's socket: $(dirname "$SOCK_DIR") is private"
    mkdir -p "$SOCK_DIR"
    chmod 0755 "$SOCK_DIR"
  fi
  echo "$SOCK_DIR" >"$base/munge/socket_dir"
  [ -s "$base/munge/munge.key" ] || mungekey --create --keyfile="$base/munge/munge.key" --bits=1024
  chmod 0400 "$base/munge/munge.key"
  munged --socket="$SOCK_DIR/munge.socket" --key-file="$base/munge/munge.key" --pid-file="$base/run/munged.pid" \
    --log-file="$base/log/munged.log" --seed-file="$base/munge/munged.seed" ||
    die "munged did not start ($base/log/munged.log)"
  munge --socket="$SOCK_DIR/munge.socket" -n </dev/null | unmunge --socket="$SOCK_DIR/munge.socket" >/dev/null ||
    die "munge round trip failed ($base/log/munged.log)"
}

# --- stopping ---

# alive PIDFILE NAME: prints the PID when it runs and /proc/PID/comm is NAME (a stale pid file never
# names an unrelated process).
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

# stop_pid PID: TERM, KILL after 15 s; 1 when it is still there 5 s later.
stop_pid() {
  kill -TERM "$1" 2>/dev/null
  for _ in $(seq 1 150); do running "$1" || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
  for _ in $(seq 1 50); do running "$1" || return 0; sleep 0.1; done
  return 1
}

# stop_daemons PREFIX BASE PIDNAME:PROGRAM...: stops each daemon of BASE/run/PIDNAME.pid whose program is
# PROGRAM, says so; 1 when one did not stop.
stop_daemons() {
  local prefix=$1 base=$2 rc=0 d pf pid
  shift 2
  for d in "$@"; do
    pf="$base/run/${d%%:*}.pid"
    pid=$(alive "$pf" "${d#*:}") || { rm -f "$pf"; continue; }
    if stop_pid "$pid"; then
      echo "$prefix: ${d%%:*} ($pid) stopped"
      rm -f "$pf"
    else
      echo "$prefix: ${d%%:*} ($pid) did not stop" >&2
      rc=1
    fi
  done
  return $rc
}

# remove_munge_socket_dir BASE TAG: the socket directory start_munge made outside BASE, if it did.
remove_munge_socket_dir() {
  [ -s "$1/munge/socket_dir" ] || return 0
  local sock_dir
  sock_dir=$(cat "$1/munge/socket_dir")
  case "$sock_dir" in
    "$1"/*) ;;
    */lorabench-"$2"-*) rm -rf "$sock_dir" ;;
  esac
}
