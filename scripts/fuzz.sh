#!/usr/bin/env bash
# The libFuzzer targets of the file readers (tests/fuzz; docs/testing.md, "Fuzzing the readers").
#   scripts/fuzz.sh build                        configure (clang, LORABENCH_FUZZ=ON) + build the fuzz dir
#   scripts/fuzz.sh list                         the targets
#   scripts/fuzz.sh run TARGET|all [-t SECONDS] [-n RUNS] [-- libFuzzer options...]
#                                                the campaign: build if needed, then fuzz each target over
#                                                its seed corpus (tests/fuzz/corpus/<target>) and what earlier
#                                                runs found, with a random seed, for SECONDS (default 30) or
#                                                RUNS executions, whichever comes first
#   scripts/fuzz.sh check TARGET|all               what ctest -L fuzz (CI) runs: deterministic, the same
#                                                result at every run of a commit. Every input of the seed
#                                                corpus (the regress-* findings included) once, then a fixed
#                                                number of executions (check_runs below) with a fixed seed
#                                                from the seed corpus alone, in a fresh work directory, with
#                                                no time limit and no corpus reloading
# The fuzz build directory is $LORABENCH_FUZZ_BUILD_DIR (default: build-fuzz beside the source). Inputs the
# fuzzer finds interesting go to <fuzz dir>/work/<target>, never into the source tree; a crashing input is
# written to <fuzz dir>/artifacts/<target>/ and the run fails (exit 1). One line per target summarises
# executions, seconds, corpus size and the result (docs/testing.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(realpath -m "${LORABENCH_FUZZ_BUILD_DIR:-$here/build-fuzz}")"
jobs="${LORABENCH_JOBS:-2}"
targets=(fuzz_config fuzz_safetensors fuzz_hf_config fuzz_adapter_config fuzz_tokenizer fuzz_sft_data fuzz_chat
         fuzz_checkpoint fuzz_run_file)
# `check`'s executions per target: about 10 s each on the project's 2-core machines (an AVX2-only AMD EPYC VM, 2026-12-05;
# the HDF5 targets are slow by nature: each input edits a file through libhdf5 and reads it back).
declare -A check_runs=([fuzz_config]=20000 [fuzz_safetensors]=60000 [fuzz_hf_config]=80000
                       [fuzz_adapter_config]=80000 [fuzz_tokenizer]=25000 [fuzz_sft_data]=40000
                       [fuzz_chat]=120000 [fuzz_checkpoint]=2500 [fuzz_run_file]=150)
check_seed=20261205

die() { echo "fuzz.sh: $*" >&2; exit 2; }

# Several `run`s may start at once (ctest -j runs the targets' tests in parallel): two ninjas in one directory
# race on its build log (ninja: error: opening build log) and one fails, so the configure + build is taken
# under a lock beside the directory.
build_fuzzers() {
  command -v clang++ >/dev/null 2>&1 || die "clang++ not found (scripts/install-deps.sh installs clang and libclang-rt-14-dev)"
  # shellcheck source=compiler-cache.sh
  . "$here/scripts/compiler-cache.sh"
  mkdir -p "$(dirname "$build")"
  (
    flock 9 || die "cannot lock $build.lock"
    if [ ! -f "$build/build.ninja" ]; then
      CC=clang CXX=clang++ cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DLORABENCH_FUZZ=ON -DLORABENCH_BUILD_TESTS=OFF -DLORABENCH_WITH_CUDA=OFF -DLORABENCH_WITH_NCCL=OFF \
        -DLORABENCH_WITH_PAPI=OFF "${lb_cache_args[@]}" >"$build.configure.log" 2>&1 || { cat "$build.configure.log" >&2; exit 1; }
    fi
    cmake --build "$build" -j "$jobs" --target lorabench_fuzzers
  ) 9>"$build.lock"
}

# `run` builds quietly: the build's output is shown only when it fails.
build_quietly() {
  local log="$build.run-build.$$.log" rc=0
  ( build_fuzzers ) >"$log" 2>&1 || rc=$?  # a subshell: a die inside still reaches the lines below
  if [ "$rc" -ne 0 ]; then cat "$log" >&2; echo "fuzz.sh: building $build failed (exit $rc)" >&2; fi
  rm -f "$log"
  return "$rc"
}

run_one() {  # target work-dir seconds runs extra...   (seconds 0: no time limit)
  local t="$1" work="$2" secs="$3" runs="$4"
  shift 4
  local corpus="$here/tests/fuzz/corpus/${t#fuzz_}" art="$build/artifacts/$t"
  [ -d "$corpus" ] || die "no seed corpus $corpus"
  mkdir -p "$work" "$art"
  local log="$build/logs/$t.log"
  mkdir -p "$build/logs"
  local args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$art/" "$@")
  [ -n "$runs" ] && args+=(-runs="$runs")
  local start rc=0
  start=$(date +%s.%N)
  if [ "${LB_FUZZ_FIXED:-0}" = 1 ]; then
    # check: the same process image wherever the checkout and build are. Address-space randomisation
    # off (libFuzzer's table of recent comparisons takes the operands of pointer comparisons too, so with
    # ASLR the mutations, and the coverage reached, differed from run to run under one seed), and an
    # environment and argv that do not depend on paths (their size moves every stack address): the
    # fuzzer runs in the work directory, with links of fixed names to the binary, seeds and artifacts.
    ln -s "$build/tests/fuzz/$t" "$work/bin"
    ln -s "$corpus" "$work/seeds"
    ln -s "$art" "$work/art"
    mkdir "$work/new" "$work/tmp"  # tmp: what the targets write, removed with the work directory
    args=("${args[@]/#-artifact_prefix=*/-artifact_prefix=art/}")
    (cd "$work" && env -i PATH=/usr/bin:/bin HOME=/nonexistent TMPDIR="$work/tmp" \
       setarch "$(uname -m)" -R ./bin "${args[@]}" new seeds) >"$log" 2>&1 || rc=$?
  else
    "$build/tests/fuzz/$t" "${args[@]}" "$work" "$corpus" >"$log" 2>&1 || rc=$?
  fi
  local end secs_used execs size result
  end=$(date +%s.%N)
  secs_used=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }')
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  local final
  final=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  size=$(( $(find "$work/" -type f | wc -l) + $(find "$corpus" -type f | wc -l) ))
  if [ "$rc" -eq 0 ]; then result="no findings"; else result="FINDING (exit $rc; log $log, artifacts $art)"; fi
  printf '%-20s %12s execs %6s s  corpus %5s files  %-18s %s\n' "$t" "${execs:-?}" "$secs_used" "$size" "${final:-cov: ?}" "$result"
  if [ "$rc" -ne 0 ]; then
    grep -E "ERROR|SUMMARY|fuzz finding|==[0-9]+==|uncaught|Test unit written" "$log" | head -20 >&2 || true
    return 1
  fi
}

# The targets write each input to a file: on tmpfs that is ~5x faster than on a disk-backed /tmp.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  build) build_fuzzers ;;
  list) printf '%s\n' "${targets[@]}" ;;
  run)
    [ $# -ge 1 ] || die "usage: scripts/fuzz.sh run TARGET|all [-t SECONDS] [-n RUNS] [-- libFuzzer options]"
    which="$1"
    shift
    secs=30 runs=""
    while [ $# -gt 0 ]; do
      case "$1" in
        -t) secs="$2"; shift 2 ;;
        -n) runs="$2"; shift 2 ;;
        --) shift; break ;;
        *) die "unknown option $1" ;;
      esac
    done
    if [ "$which" = all ]; then sel=("${targets[@]}"); else sel=("$which"); fi
    for t in "${sel[@]}"; do
      # (not printf | grep -q: with pipefail, grep -q leaving at the first line can cut printf off with
      # SIGPIPE, and the pipeline fails for the first target: CI saw "unknown target fuzz_config")
      known=0
      for k in "${targets[@]}"; do [ "$k" = "$t" ] && known=1; done
      [ "$known" = 1 ] || die "unknown target $t (scripts/fuzz.sh list)"
    done
    build_quietly || exit 1
    failed=0
    for t in "${sel[@]}"; do run_one "$t" "$build/work/$t" "$secs" "$runs" "$@" || failed=1; done
    exit "$failed"
    ;;
  check)
    [ $# -eq 1 ] || die "usage: scripts/fuzz.sh check TARGET|all"
    if [ "$1" = all ]; then sel=("${targets[@]}"); else sel=("$1"); fi
    for t in "${sel[@]}"; do [ -n "${check_runs[$t]:-}" ] || die "unknown target $t (scripts/fuzz.sh list)"; done
    # (run_one's LB_FUZZ_FIXED says why; tests/fuzz/check_deterministic.sh checks it)
    setarch "$(uname -m)" -R true 2>/dev/null ||
      die "check needs address-space randomisation off for determinism, and setarch -R is refused here"
    [ -d /dev/shm ] && [ -w /dev/shm ] || die "check needs a writable /dev/shm (its fixed TMPDIR)"
    build_quietly || exit 1
    failed=0
    for t in "${sel[@]}"; do
      work=$(mktemp -d /dev/shm/lorabench-fuzz-check.XXXXXX)
      LB_FUZZ_FIXED=1 run_one "$t" "$work" 0 "${check_runs[$t]}" -seed="$check_seed" -reload=0 || failed=1
      rm -rf "$work"
    done
    exit "$failed"
    ;;
  *) die "usage: scripts/fuzz.sh build | list | run TARGET|all [-t SECONDS] [-n RUNS] [-- libFuzzer options] | check TARGET|all" ;;
esac
