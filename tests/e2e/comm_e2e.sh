#!/usr/bin/env bash
# End-to-end cases for `lorabench comm` and `lorabench doctor` (tests/e2e/comm.cmake).
#   comm_e2e.sh CASE LORABENCH CHECKER WORKDIR MPIEXEC...
set -euo pipefail
case_name=$1 lorabench=$2 checker=$3 work=$4
shift 4
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"

tiny=(--min-bytes 64 --max-bytes 16K --factor 16 --warmup 1 --iters 3)
case "$case_name" in
  sweep)
    # 5 ops x 3 sizes (64 B, 1 KiB, 16 KiB) on 2 ranks.
    run 0 out.txt "${mpiexec[@]}" -n 2 "$lorabench" comm "${tiny[@]}" -o "$work/run.h5"
    expect_in out.txt "every result equals its closed form -> VALID"
    expect_in out.txt "# all_to_all"
    "$checker" comm-run "$work/run.h5" 15 2
    h5dump -H "$work/run.h5" >/dev/null || fail "h5dump cannot read the run file"
    # Never overwritten: the same -o again is a configuration error (exit 2).
    run 2 again.txt "${mpiexec[@]}" -n 2 "$lorabench" comm "${tiny[@]}" -o "$work/run.h5"
    expect_in again.txt "exists"
    # Without -o or --name: outputs/comm-mpi-n2, then comm-mpi-n2-2; a --name given twice is refused.
    run 0 d1.txt "${mpiexec[@]}" -n 2 "$lorabench" comm "${tiny[@]}" --ops all_reduce
    run 0 d2.txt "${mpiexec[@]}" -n 2 "$lorabench" comm "${tiny[@]}" --ops all_reduce
    [[ -f outputs/comm-mpi-n2/run.h5 && -f outputs/comm-mpi-n2-2/run.h5 ]] || fail "no numbered default comm runs"
    run 0 n1.txt "${mpiexec[@]}" -n 2 "$lorabench" comm "${tiny[@]}" --ops all_reduce --name mine
    run 2 n2.txt "${mpiexec[@]}" -n 2 "$lorabench" comm "${tiny[@]}" --ops all_reduce --name mine
    expect_in n2.txt "$work/outputs/mine/run.h5 exists"
    ;;
  config)
    printf '# comm sweep\n[comm]\nops = all_reduce, all_to_all\nmin_bytes = 1K\nmax_bytes = 4K\nfactor = 2\n'\
'dtype = int64\niters = 2\nwarmup = 0\nname = from-ini\n' >comm.ini
    # The flag overrides the file's dtype: bf16 all_reduce sums must still be exact.
    run 0 out.txt "${mpiexec[@]}" -n 2 "$lorabench" comm --config comm.ini --dtype bf16
    expect_in out.txt "bf16"
    "$checker" comm-run "$work/outputs/from-ini/run.h5" 6 2
    printf '[comm]\nops = all_reduce\nbogus = 1\niters = x\n' >bad.ini
    run 2 bad.txt "${mpiexec[@]}" -n 2 "$lorabench" comm --config bad.ini
    expect_in bad.txt "bad.ini:3: bogus: unknown key"
    expect_in bad.txt "bad.ini:4: iters:"
    run 2 flag.txt "${mpiexec[@]}" -n 2 "$lorabench" comm --ops all_reduce,nope
    expect_in flag.txt "unknown collective \"nope\""
    ;;
  doctor)
    run 0 doctor.txt "${mpiexec[@]}" -n 2 "$lorabench" doctor --output-dir "$work/outputs"
    expect_in doctor.txt "lorabench doctor: ready"
    run 0 doctor.json "${mpiexec[@]}" -n 2 "$lorabench" doctor --json --output-dir "$work/outputs"
    # stdout only (mpirun may add lines to stderr): run again keeping the streams apart.
    "${mpiexec[@]}" -n 2 "$lorabench" doctor --json --output-dir "$work/outputs" >doctor-stdout.json 2>/dev/null
    "$checker" doctor-json doctor-stdout.json
    grep -qE '"version": ?"[0-9]+\.[0-9]+\.[0-9]+"' doctor-stdout.json || fail "doctor --json has no version"
    run 1 baddir.txt "$lorabench" doctor --output-dir /proc/lorabench-cannot-exist
    expect_in baddir.txt "FAIL  output_dir"
    # The directories doctor creates only to try them are gone afterwards; one that was there stays.
    [[ ! -e "$work/outputs" ]] || fail "doctor left $work/outputs behind"
    run 0 nested.txt "$lorabench" doctor --output-dir "$work/new/runs/here"
    expect_in nested.txt "$work/new/runs/here is writable"
    [[ ! -e "$work/new" ]] || fail "doctor left $work/new behind"
    mkdir -p kept && run 0 kept.txt "$lorabench" doctor --output-dir "$work/kept"
    [[ -d kept && -z "$(ls -A kept)" ]] || fail "doctor removed or filled an existing directory"
    ;;
  *) fail "unknown case $case_name" ;;
esac
echo "ok: $case_name"
