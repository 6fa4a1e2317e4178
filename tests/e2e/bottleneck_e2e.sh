#!/usr/bin/env bash
# End-to-end bottleneck attribution (tests/e2e/bottleneck.cmake): a 2-rank ddp run of the tiny preset
# with one cause of slowness, then lorabench-report on it; the verdict, the rank it names and the numbers
# behind it are checked.
#   bottleneck_e2e.sh CASE LORABENCH LORABENCH_REPORT CHECKER WORKDIR SOURCE_DIR MPIEXEC...
set -euo pipefail
case_name=$1 lorabench=$2 report=$3 checker=$4 work=$5 src=$6
shift 6
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"

# ~0.4 s steps (the tiny preset's 151936-row LM head dominates: forward); 8 measured steps. The ranks are
# not bound to cores (--bind-to none): the kernel spreads them and anything else that runs, so only the
# injected cause makes a rank slow. train_prefix runs each rank through a wrapper (external_load pins them).
train_prefix=()
# These are timing measurements: on failure, say how busy the machine was (another process competing for a
# CPU makes a rank a real straggler), and stop the busy process of external_load.
busy=""
on_exit() {
  local rc=$?
  [[ -z $busy ]] || kill "$busy" 2>/dev/null || true
  if [[ $rc -ne 0 ]]; then
    echo "load average at the end: $(cat /proc/loadavg); busiest processes:" >&2
    ps -eo pid,ni,pcpu,etime,comm --sort=-pcpu | head -n 6 >&2
  fi
}
trap on_exit EXIT
train() {
  local name=$1
  shift
  run 0 "$name.log" "${mpiexec[@]}" --bind-to none -n 2 "${train_prefix[@]}" "$lorabench" "$src/inputs/tiny.ini" \
    --set run.output_dir="$work/out" --set run.name="$name" --set run.quiet=true --set parallel.strategy=ddp \
    --set run.steps=10 --set run.warmup_steps=2 --set train.micro_batch=4 --set data.seq_len=64 "$@"
  "$checker" train-run "out/$name/run.h5" 2 10
}
# The report on the given inputs; prints the run's attribution line into $name.verdict.
verdict() {
  local name=$1
  shift
  run 0 "$name.report.log" "$report" "$@" -o "$name.md"
  grep -E "^- \*\*$name\*\* \(ddp, 2 ranks\): " "$name.md" >"$name.verdict" || { cat "$name.md" >&2; fail "no verdict for $name"; }
  cat "$name.verdict"
}
# number_at_least FILE REGEX-WITH-ONE-GROUP MIN: the group's number in FILE is >= MIN.
number_at_least() {
  local v
  v=$(sed -nE "s/.*$2.*/\1/p" "$1" | head -n 1)
  [[ -n $v ]] || { cat "$1" >&2; fail "no match for /$2/ in $1"; }
  python3 -c "import sys; sys.exit(0 if float('$v') >= float('$3') else 1)" ||
    { cat "$1" >&2; fail "$v < $3 for /$2/ in $1"; }
}

case "$case_name" in
  balanced)
    # Nothing injected. A process competing for a CPU during the run makes the ranks take turns being
    # slow (a real, intermittent straggler), so further runs are allowed when one is not compute-bound; a
    # report that finds a straggler or a slow link in a balanced run every time still fails. Three runs: on
    # this project's 2-vCPU CI machine, time stolen from one vCPU by the host once made two consecutive
    # balanced runs show one rank 1.3-1.6x slower in forward (passing 3 of 3 when rerun minutes later).
    # When the host steals time from both vCPUs in turn for the whole window (seen on the Zen 4 CI VM: three
    # runs in a row with the slowest rank changing from step to step, median-step ratios 1.13-1.20), the report
    # rightly says so: "no single slow rank", an intermittent straggler. That verdict is accepted after three
    # runs; a persistent straggler naming a rank, a slow link or slow data in a balanced run still fails.
    for attempt in 1 2 3; do
      name=balanced$attempt
      train "$name"
      verdict "$name" "out/$name/run.h5"
      grep -q '\*\*compute-bound\*\*' "$name.verdict" && break
      echo "attempt $attempt not compute-bound (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    done
    if grep -q '\*\*compute-bound\*\*' "$name.verdict"; then
      expect_re "$name.verdict" '\*\*compute-bound\*\*: forward \+ backward \+ optimizer are [0-9]+% of the step'
      # No straggler in the median step: balanced, or at most a few hiccup steps.
      expect_re "$name.md" "^\\| $name \\| ddp \\| 2 \\| .* \\| (balanced|hiccup) \\|\$"
    else
      expect_re "$name.verdict" '\*\*straggler-bound\*\*: no single slow rank: .* but the slowest rank changes from step to step'
      expect_re "$name.md" "^\\| $name \\| ddp \\| 2 \\| .* \\| (balanced|hiccup|intermittent) \\|\$"
      echo "balanced: three runs on a host that slowed the ranks in turn; the report said so (no single slow rank)"
    fi
    ;;
  slow_rank)
    # Bad fault settings are configuration errors naming the file (or --set) and the key, exit code 2.
    printf '[fault]\nslow_rank = 1\nslow_factor = 0.5\n' >bad.ini
    run 2 bad.log "${mpiexec[@]}" -n 2 "$lorabench" bad.ini
    expect_in bad.log "bad.ini:3: fault.slow_factor: must be in [1, inf), got 0.5"
    run 2 bad.log "${mpiexec[@]}" -n 2 "$lorabench" "$src/inputs/tiny.ini" --set parallel.strategy=ddp \
      --set fault.slow_rank=2 --set fault.slow_factor=3
    expect_in bad.log "--set: fault.slow_rank: rank 2 does not exist in a job of 2 ranks"
    # Rank 1's forward, backward and optimizer take 3x as long.
    train slow_rank --set fault.slow_rank=1 --set fault.slow_factor=3
    verdict slow_rank out/slow_rank/run.h5
    expect_re slow_rank.verdict '\*\*straggler-bound\*\*: rank 1 computes [0-9.]+x as long as the other ranks'
    number_at_least slow_rank.verdict 'rank 1 computes ([0-9.]+)x as long' 2.0
    expect_re slow_rank.verdict 'in [5-8] of 8 measured steps \(a persistent straggler\); its largest excess is in forward'
    expect_in slow_rank.log "fault injection: rank 1 computes 3x slower"
    [[ $(h5attr out/slow_rank/run.h5 /metrics/summary/straggler_rank) == 1 ]] || fail "straggler_rank is not 1"
    [[ $(h5attr out/slow_rank/run.h5 /metrics/summary/straggler_kind) == persistent ]] || fail "not persistent"
    ;;
  slow_data)
    # Every rank sleeps 300 ms per micro-batch while building its batches.
    train slow_data --set fault.data_delay_ms=300
    verdict slow_data out/slow_data/run.h5
    expect_re slow_data.verdict '\*\*data-bound\*\*: building the batches \(data\) is [0-9]+% of the step'
    number_at_least slow_data.verdict 'building the batches \(data\) is ([0-9]+)% of the step' 30
    ;;
  slow_comm)
    # Every gradient all-reduce completes 300 ms after MPI completed it; a collective benchmark to compare with.
    train slow_comm --set fault.comm_delay_ms=300
    run 0 comm.log "${mpiexec[@]}" -n 2 "$lorabench" comm --ops all_reduce --min-bytes 16K --max-bytes 64K \
      --factor 2 --warmup 2 --iters 5 -o "$work/out/comm-2/run.h5"
    verdict slow_comm out/slow_comm/run.h5 out/comm-2/run.h5
    expect_re slow_comm.verdict '\*\*communication-bound\*\*: the ranks arrive together \(waiting for peers is [0-9]+% of the step\) yet stay blocked [0-9]+% of the step after the last one arrived'
    number_at_least slow_comm.verdict 'yet stay blocked ([0-9]+)% of the step' 30
    expect_re slow_comm.verdict 'all_reduce moved 36\.50 KiB per rank per step, i\.e\. [0-9.]+ [kMG]B/s bus bandwidth over the transfer time'
    expect_re slow_comm.verdict 'the collective benchmark \([a-z0-9-]+\) reached [0-9.]+ [kMG]B/s busbw for all_reduce fp32 at 32\.00 KiB on 2 ranks \(achieved/benchmark = [0-9.e+-]+%\): far below the benchmark'
    ;;
  external_load)
    # Rank 1 shares its CPU with a busy process started outside lorabench; no fault option at all. Each
    # rank is pinned to its own CPU (taskset in a wrapper, so it does not depend on how the MPI launcher
    # binds), the busy process to rank 1's.
    mapfile -t cpus < <(python3 -c 'import os; print("\n".join(map(str, sorted(os.sched_getaffinity(0)))))')
    [[ ${#cpus[@]} -ge 2 ]] || fail "needs 2 CPUs to pin 2 ranks to, has ${#cpus[@]} (${cpus[*]})"
    cat >pin.sh <<PIN
#!/usr/bin/env bash
cpus=(${cpus[0]} ${cpus[1]})
exec taskset -c "\${cpus[\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-0}}]}" "\$@"
PIN
    chmod +x pin.sh
    train_prefix=(./pin.sh)
    taskset -c "${cpus[1]}" bash -c 'while :; do :; done' &
    busy=$!
    train external_load
    kill "$busy"
    busy=""
    verdict external_load out/external_load/run.h5
    expect_re external_load.verdict '\*\*straggler-bound\*\*: rank 1 computes [0-9.]+x as long as the other ranks'
    number_at_least external_load.verdict 'rank 1 computes ([0-9.]+)x as long' 1.4
    expect_re external_load.verdict '\(a persistent straggler\)'
    expect_not_in external_load.log "fault injection"
    ;;
  *) fail "unknown case $case_name" ;;
esac
echo "ok"
