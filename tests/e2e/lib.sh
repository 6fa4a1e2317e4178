# Helpers shared by the end-to-end and Slurm test scripts (sourced, not run).

fail() { echo "FAIL: $*" >&2; exit 1; }

# fresh_dir DIR: DIR emptied (or made) and made the current directory.
fresh_dir() {
  rm -rf "$1"
  mkdir -p "$1"
  cd "$1"
}

# run EXPECTED_RC LOGFILE CMD...: runs CMD with stdout and stderr in LOGFILE and checks its exit code
# (EXPECTED_RC "nonzero" accepts any failure); on a mismatch prints the log and fails.
run() {
  local want=$1 log=$2
  shift 2
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  if [[ $want == nonzero ]]; then
    [[ $rc -ne 0 ]] || { cat "$log" >&2; fail "exit code 0, expected a failure: $*"; }
  else
    [[ $rc -eq $want ]] || { cat "$log" >&2; fail "exit code $rc, expected $want: $*"; }
  fi
}

# wait_unlocked FILE [SECONDS]: waits (default 10 s) until no process holds an HDF5 write lock (flock) on
# FILE, else fails. A launcher may return while the rank it SIGKILLed is still being torn down: until then
# that rank's lock on run.h5 makes h5dump refuse the file ("unable to open").
wait_unlocked() {
  flock -s -w "${2:-10}" "$1" true || fail "$1 is still locked by a writer after ${2:-10} s"
}

expect_in() { grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "\"$2\" not in $1"; }; }
expect_not_in() { ! grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "\"$2\" in $1"; }; }
expect_re() { grep -qE -- "$2" "$1" || { cat "$1" >&2; fail "no line matching /$2/ in $1"; }; }
count_in() { grep -cF -- "$2" "$1" || true; }
# flip_byte FILE OFFSET: XORs the byte at OFFSET with 0x5a, in place (a one-byte damage).
flip_byte() {
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $((b ^ 0x5a)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
# h5attr FILE OBJECT/NAME: an attribute's value as h5dump prints it, without quotes.
h5attr() { h5dump -a "$2" "$1" | sed -n 's/^ *(0): //p' | head -n 1 | tr -d '"'; }

# ranks_column FILE NAME: one column of the /ranks table, comma-separated in row order.
ranks_column() {
  h5dump -d /ranks "$1" | awk -v want="$2" '
    /^ *H5T_[A-Z0-9_]+ "[^"]+";/ { match($0, /"[^"]+"/); cols[n++] = substr($0, RSTART + 1, RLENGTH - 2) }
    /^ *DATA \{/ { data = 1; next }
    data && /^ *-?[0-9]+,?$/ { gsub(/[ ,]/, ""); if (cols[m++ % n] == want) out = out (out == "" ? "" : ",") $0 }
    END { print out }'
}
