#!/usr/bin/env bash
# End-to-end cases for checkpoints, resume and fault injection (tests/e2e/checkpoint.cmake).
#   checkpoint_e2e.sh CASE LORABENCH RUN_CHECKER CKPT_CHECKER WORKDIR SOURCE_DIR MPIEXEC...
set -euo pipefail
case_name=$1 lorabench=$2 run_checker=$3 checker=$4 work=$5 src=$6
shift 6
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"

ckpts() { (cd "$1" && ls) | tr '\n' ' '; }
digest() { sha256sum "$1" | cut -d' ' -f1; }

tiny=("$src/inputs/tiny.ini" --set run.output_dir="$work/out" --set run.quiet=true --set run.warmup_steps=0
      --set run.log_every=1 --set checkpoint.keep_last=0)
C=out/ref/checkpoints
case "$case_name" in
  adapter)
    # The adapter workflow on the qwen2-tiny snapshot: export-adapter from any checkpoint, the base model
    # the adapter names, lora.init_from (also sharded, under fsdp) and its mismatch errors.
    fx="$src/tests/fixtures"
    snap=(--set model.path="$fx/qwen2-tiny" --set checkpoint.every=3)
    # A completed run: its last checkpoint exports byte for byte the adapter the run wrote at its end.
    run 0 a.log "$lorabench" "${tiny[@]}" "${snap[@]}" --set run.name=a
    run 0 exp_a.txt "$lorabench" checkpoint export-adapter out/a/checkpoints/step_00000006.h5 exp_a
    expect_in exp_a.txt "step 6 of out/a/checkpoints/step_00000006.h5"
    cmp exp_a/adapter_model.safetensors out/a/adapter/adapter_model.safetensors || fail "exported tensors differ"
    cmp exp_a/adapter_config.json out/a/adapter/adapter_config.json || fail "exported adapter_config.json differs"
    # The snapshot has no _name_or_path and is not in the Hugging Face cache: its absolute path.
    expect_in exp_a/adapter_config.json "\"base_model_name_or_path\": \"$fx/qwen2-tiny\""
    run 2 again.txt "$lorabench" checkpoint export-adapter out/a/checkpoints/step_00000006.h5 exp_a
    expect_in again.txt "exp_a exists and is not empty"
    # A killed run still yields its last good adapter, and lorabench forward loads it.
    run nonzero k.log "$lorabench" "${tiny[@]}" "${snap[@]}" --set run.name=k --set fault.kill_rank=0 \
      --set fault.kill_at_step=4
    [[ ! -d out/k/adapter ]] || fail "a killed run wrote its end-of-run adapter"
    run 0 exp_k.txt "$lorabench" checkpoint export-adapter out/k/checkpoints/step_00000003.h5 exp_k
    run 0 fwd.txt "$lorabench" forward --model "$fx/qwen2-tiny" --adapter exp_k --ids 1,2,3 --out k.safetensors
    # lora.init_from under fsdp on 2 ranks with lr 0: nothing moves, so the step-1 checkpoint holds run a's
    # adapter bit for bit (each rank loaded its shard of it), and the first loss is the adapted model's.
    run 0 b.log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set model.path="$fx/qwen2-tiny" --set run.name=b \
      --set parallel.strategy=fsdp --set lora.init_from=out/a/adapter --set train.lr=0 --set run.steps=1 \
      --set checkpoint.every=1
    run 0 exp_b.txt "$lorabench" checkpoint export-adapter out/b/checkpoints/step_00000001.h5 exp_b
    cmp exp_b/adapter_model.safetensors out/a/adapter/adapter_model.safetensors ||
      fail "lora.init_from did not start from the adapter"
    # Mismatches are configuration errors before anything is written.
    run 2 r8.txt "$lorabench" "${tiny[@]}" "${snap[@]}" --set run.name=c --set lora.init_from=out/a/adapter \
      --set lora.r=8 --set lora.targets=q,v
    expect_in r8.txt "the adapter does not match the configuration:"
    expect_in r8.txt "r: adapter 4, lora.r 8"
    expect_in r8.txt "target_modules: adapter down,gate,k,o,q,up,v, lora.targets q,v"
    run 2 nodir.txt "$lorabench" "${tiny[@]}" "${snap[@]}" --set run.name=c --set lora.init_from=out/a
    expect_in nodir.txt "lora.init_from = out/a (resolved against the working directory: $work/out/a): has no adapter_config.json"
    [[ ! -e out/c ]] || fail "a configuration error created the run directory"
    ;;
  commit)
    # Checkpoints every 2 steps, 2 kept; the files, the pointer, h5dump, info and verify.
    run 0 log "$lorabench" "${tiny[@]}" --set run.name=r --set checkpoint.every=2 --set checkpoint.keep_last=2
    "$run_checker" train-run out/r/run.h5 1 6
    [[ "$(ckpts out/r/checkpoints)" == "latest step_00000004.h5 step_00000006.h5 " ]] ||
      fail "checkpoints: $(ckpts out/r/checkpoints)"
    [[ "$(cat out/r/checkpoints/latest)" == step_00000006.h5 ]] || fail "latest: $(cat out/r/checkpoints/latest)"
    h5dump -H out/r/checkpoints/step_00000006.h5 >dump.txt
    for name in complete format_version state schedule optimizer exp_avg exp_avg_sq trainable data rng rank_seeds \
                fingerprint writer digest; do
      expect_in dump.txt "\"$name\""
    done
    h5dump -a /complete out/r/checkpoints/step_00000006.h5 >complete.txt
    expect_in complete.txt "(0): 1"
    h5dump -a /metrics/summary/checkpoints_written out/r/run.h5 >written.txt
    expect_in written.txt "(0): 3"
    run 0 info.txt "$lorabench" checkpoint info out/r/checkpoints/step_00000004.h5
    for text in "step        4" "digests verified" "lora.r                   4" "data.seq_len             32" \
                "model.base_weights       random-init preset=tiny seed=1234" "next_sample              8" \
                "kind                     counter-based" "optimizer_step           4" \
                "trainable/base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" "[4, 64]"; do
      expect_in info.txt "$text"
    done
    run 0 same.txt "$lorabench" checkpoint verify out/r/checkpoints/step_00000006.h5 out/r/checkpoints/step_00000006.h5
    expect_in same.txt "verdict: identical"
    run 1 diff.txt "$lorabench" checkpoint verify out/r/checkpoints/step_00000004.h5 out/r/checkpoints/step_00000006.h5
    expect_in diff.txt "DIFFERS"
    expect_in diff.txt "state         step"
    head -c 5000 out/r/checkpoints/step_00000006.h5 >cut.h5
    run 2 cut.txt "$lorabench" checkpoint info cut.h5
    expect_in cut.txt "cut.h5: damaged: 5000 bytes, the seal says"
    expect_in cut.txt "(truncated)"
    # One byte of the HDF5 metadata (the superblock, just after the 512 bytes of the seal; and the root
    # group's object header) changed: info and verify report the file as damaged (exit 2), libhdf5 never
    # reads it (issue 49, item 3: it segfaulted or hung there).
    for off in 520 700 1200; do
      cp out/r/checkpoints/step_00000006.h5 meta.h5
      flip_byte meta.h5 "$off"
      run 2 meta-info.txt "$lorabench" checkpoint info meta.h5
      expect_in meta-info.txt "meta.h5: damaged: the file's hash"
      run 2 meta-verify.txt "$lorabench" checkpoint verify meta.h5 out/r/checkpoints/step_00000006.h5
      expect_in meta-verify.txt "meta.h5: damaged: the file's hash"
    done
    expect_in info.txt "seal        hash "
    run 2 usage.txt "$lorabench" checkpoint verify only-one.h5
    ;;
  kill_single)
    # LoRA dropout on; rank 0 of a one-rank job SIGKILLs itself at the start of step 3 (after the checkpoint
    # of step 2); the restart with resume = latest reproduces the uninterrupted run bit for bit.
    common=("${tiny[@]}" --set lora.dropout=0.1 --set checkpoint.every=2)
    run 0 log "$lorabench" "${common[@]}" --set run.name=ref
    run nonzero killed.log "$lorabench" "${common[@]}" --set run.name=k --set fault.kill_rank=0 --set fault.kill_at_step=3
    expect_in killed.log "fault injection: rank 0 kills itself at step 3"
    [[ "$(ckpts out/k/checkpoints)" == "latest step_00000002.h5 " ]] || fail "checkpoints: $(ckpts out/k/checkpoints)"
    h5dump out/k/run.h5 >/dev/null || fail "the killed run's run.h5 is not readable by h5dump"
    "$checker" run out/k/run.h5 3 running
    before=$(digest out/k/checkpoints/step_00000002.h5)
    run 0 verify2.txt "$lorabench" checkpoint verify $C/step_00000002.h5 out/k/checkpoints/step_00000002.h5
    run 0 restart.log "$lorabench" "${common[@]}" --set run.name=k --set checkpoint.resume=latest --set run.quiet=false
    expect_in restart.log "resume: $work/out/k/checkpoints/step_00000002.h5, step 2"
    [[ -f out/k/run.1.h5 ]] || fail "the killed run's file was not kept as run.1.h5"
    "$checker" run out/k/run.1.h5 3 running
    "$checker" run out/k/run.h5 4 completed
    "$checker" provenance out/k/run.h5 resumed_from step_00000002.h5
    "$checker" provenance out/k/run.h5 previous_run_file run.1.h5
    "$checker" losses out/ref/run.h5 out/k/run.1.h5 0
    "$checker" losses out/ref/run.h5 out/k/run.h5 0
    [[ "$(digest out/k/checkpoints/step_00000002.h5)" == "$before" ]] || fail "the resumed checkpoint changed"
    run 0 verify6.txt "$lorabench" checkpoint verify $C/step_00000006.h5 out/k/checkpoints/step_00000006.h5
    expect_in verify6.txt "verdict: identical"
    cmp out/ref/adapter/adapter_model.safetensors out/k/adapter/adapter_model.safetensors ||
      fail "adapters differ after the restart"
    ;;
  kill_ddp)
    # Two ranks, rank 1 SIGKILLs itself at step 4: mpirun fails, the checkpoint of step 4 is complete and
    # unchanged, run.h5 holds every finished step (log_every = 1) and stays readable; the restart reaches
    # the uninterrupted run's final state.
    common=("${tiny[@]}" --set parallel.strategy=ddp --set checkpoint.every=2)
    run 0 log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=ref
    run nonzero killed.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=k \
      --set fault.kill_rank=1 --set fault.kill_at_step=4
    expect_in killed.log "fault injection: rank 1 kills itself at step 4"
    # mpirun answers the dead rank with SIGTERM to rank 0, which lorabench takes as a stop request (it is
    # blocked in a collective with the dead rank), then SIGKILL; mpirun can return while rank 0 is still
    # being torn down, holding its lock on run.h5.
    wait_unlocked out/k/run.h5
    [[ "$(ckpts out/k/checkpoints)" == "latest step_00000002.h5 step_00000004.h5 " ]] ||
      fail "checkpoints: $(ckpts out/k/checkpoints)"
    [[ "$(cat out/k/checkpoints/latest)" == step_00000004.h5 ]] || fail "latest: $(cat out/k/checkpoints/latest)"
    h5dump out/k/run.h5 >/dev/null || fail "the killed run's run.h5 is not readable by h5dump"
    "$checker" run out/k/run.h5 8 running
    "$checker" losses out/ref/run.h5 out/k/run.h5 0
    before=$(digest out/k/checkpoints/step_00000004.h5)
    run 0 verify4.txt "$lorabench" checkpoint verify $C/step_00000004.h5 out/k/checkpoints/step_00000004.h5
    run 0 restart.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=k --set checkpoint.resume=latest
    [[ "$(digest out/k/checkpoints/step_00000004.h5)" == "$before" ]] || fail "the last complete checkpoint changed"
    "$checker" run out/k/run.h5 4 completed
    "$checker" losses out/ref/run.h5 out/k/run.h5 0
    run 0 verify6.txt "$lorabench" checkpoint verify $C/step_00000006.h5 out/k/checkpoints/step_00000006.h5
    expect_in verify6.txt "verdict: identical"
    cmp out/ref/adapter/adapter_model.safetensors out/k/adapter/adapter_model.safetensors ||
      fail "adapters differ after the restart"
    ;;
  preempt)
    # A stop signal (what Slurm sends before a time limit or on preemption): rank 1 sends itself SIGTERM at
    # the start of step 4, and again while the stop checkpoint is written. Every rank finishes step 4, the
    # checkpoint of 5 steps is written once and complete although checkpoint.every = 0, run.h5 says
    # preempted with a VALID verdict over the 5 steps, the exit code is 75; checkpoint.resume = auto then
    # continues bit-identically to the uninterrupted run (which itself started with auto and no checkpoint),
    # and the stop checkpoint equals that run's checkpoint of step 5.
    common=("${tiny[@]}" --set parallel.strategy=zero2 --set run.steps=10 --set checkpoint.resume=auto)
    run 0 ref.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=ref --set checkpoint.every=5
    run 75 stop.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=p --set run.quiet=false \
      --set fault.signal_rank=1 --set fault.signal_at_step=4 --set fault.signal=term --set fault.signal_again=true
    expect_in stop.log "rank 1 sends itself SIGTERM at step 4"
    expect_in stop.log "rank 1 sends itself SIGTERM again during the checkpoint write"
    expect_in stop.log "another stop signal: already stopping"
    [[ "$(ckpts out/p/checkpoints)" == "latest step_00000005.h5 " ]] || fail "checkpoints: $(ckpts out/p/checkpoints)"
    [[ "$(count_in stop.log "checkpoint: ")" == 1 ]] || fail "expected one checkpoint write"
    "$checker" run out/p/run.h5 10 preempted "stopped by SIGTERM after 5 of 10 steps; checkpoint "
    [[ "$(h5attr out/p/run.h5 /verdict)" == VALID ]] || fail "verdict $(h5attr out/p/run.h5 /verdict)"
    [[ "$(h5attr out/p/run.h5 /metrics/summary/stopped_after_steps)" == 5 ]] || fail "stopped_after_steps"
    [ ! -e out/p/adapter ] || fail "a preempted run wrote the final adapter"
    run 0 verify.txt "$lorabench" checkpoint verify $C/step_00000005.h5 out/p/checkpoints/step_00000005.h5
    expect_in verify.txt "verdict: identical"
    run 0 resume.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=p
    "$checker" run out/p/run.h5 10 completed
    "$checker" run out/p/run.1.h5 10 preempted
    # The resumed run's and the stopped run's attributes are on docs/hdf5-schema.md too.
    "$run_checker" schema-doc out/p/run.h5 "$src/docs/hdf5-schema.md"
    "$run_checker" schema-doc out/p/run.1.h5 "$src/docs/hdf5-schema.md"
    "$checker" losses out/ref/run.h5 out/p/run.1.h5 0
    "$checker" losses out/ref/run.h5 out/p/run.h5 0
    cmp out/ref/adapter/adapter_model.safetensors out/p/adapter/adapter_model.safetensors ||
      fail "adapters differ after the preemption and resume"
    # SIGUSR1 right after a periodic checkpoint (checkpoint.every = 2, stop after 4 steps): no second write.
    run 75 usr1.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=u --set run.quiet=false --set checkpoint.every=2 \
      --set fault.signal_rank=0 --set fault.signal_at_step=3
    [[ "$(grep -c "^checkpoint: .*/step_00000004.h5 (" usr1.log)" == 1 ]] || fail "the checkpoint of step 4 was not written exactly once"
    "$checker" run out/u/run.h5 8 preempted "stopped by SIGUSR1 after 4 of 10 steps"
    ;;
  interrupt)
    # Ctrl-C. A run started by hand without a launcher takes SIGINT as a stop request: it finishes the step,
    # writes the checkpoint, says preempted (VALID) and exits 75. Under mpirun (Open MPI) Ctrl-C reaches mpirun,
    # which sends SIGTERM to every rank: the ranks checkpoint and exit 75, but mpirun itself returns 1 for an
    # interrupted job; SIGUSR1 to mpirun is forwarded as such, and then mpirun returns the ranks' 75.
    # The job control of `set -m` keeps SIGINT as it is for the background jobs (a script's & ignores it).
    started() { for _ in $(seq 600); do grep -q "^step 3/" "$1" && return 0; sleep 0.1; done; fail "no step 3 in $1"; }
    long=("${tiny[@]}" --set run.steps=100000 --set run.quiet=false --set checkpoint.every=0)
    set -m
    "$lorabench" "${long[@]}" --set run.name=c >c.log 2>&1 &
    pid=$!
    started c.log
    kill -INT $pid
    rc=0; wait $pid || rc=$?
    [[ $rc == 75 ]] || { cat c.log; fail "exit code $rc after SIGINT, expected 75"; }
    expect_in c.log "lorabench: SIGINT: stopping after this step with a checkpoint"
    n=$(h5attr out/c/run.h5 /metrics/summary/stopped_after_steps)
    "$checker" run out/c/run.h5 "$n" preempted "stopped by SIGINT after $n of 100000 steps; checkpoint "
    [[ "$(h5attr out/c/run.h5 /verdict)" == VALID ]] || fail "verdict $(h5attr out/c/run.h5 /verdict)"
    run 0 info.txt "$lorabench" checkpoint info "out/c/checkpoints/$(cat out/c/checkpoints/latest)"
    expect_re info.txt "^step +$n\$"
    expect_in info.txt "complete"
    for sig in INT USR1; do
      "${mpiexec[@]}" -n 2 "$lorabench" "${long[@]}" --set run.name=m$sig --set parallel.strategy=ddp >m$sig.log 2>&1 &
      pid=$!
      started m$sig.log
      kill -$sig $pid
      rc=0; wait $pid || rc=$?
      want=75; [[ $sig == INT ]] && want=1
      [[ $rc == "$want" ]] || { cat m$sig.log; fail "mpirun returned $rc after SIG$sig, expected $want"; }
      wait_unlocked out/m$sig/run.h5
      sent=SIGUSR1; [[ $sig == INT ]] && sent=SIGTERM
      n=$(h5attr out/m$sig/run.h5 /metrics/summary/stopped_after_steps)
      "$checker" run out/m$sig/run.h5 $((2 * n)) preempted "stopped by $sent after $n of 100000 steps; checkpoint "
      [[ -f out/m$sig/checkpoints/latest ]] || fail "no checkpoint after SIG$sig to mpirun"
    done
    set +m
    ;;
  io_errors)
    # A full disk and a failing device, injected with an LD_PRELOAD shim on rank 0 (tests/e2e/failwrite.c).
    # A failed checkpoint write (ENOSPC) and a failed run-file write (EIO) in mid-run each stop both ranks
    # together with exit code 4 and the path and reason on every rank; the checkpoints before stay, resume
    # selects the newest of them and reaches the uninterrupted run's losses bit-identically.
    shim=${LB_TEST_FAILWRITE:?the failwrite shim (set by checkpoint.cmake)}
    common=("${tiny[@]}" --set parallel.strategy=ddp --set checkpoint.every=2 --set run.steps=8)
    run 0 ref.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=ref
    # 1. ENOSPC while rank 0 writes the checkpoint of step 4: at its first byte, in its middle (the disk has
    # 100000 bytes for it, reservations included), and EIO in its middle (a failing device). Each ends with
    # exit 4 and the reason on every rank (no crash as libhdf5 shuts down), no unfinished .tmp left behind,
    # and step 2's checkpoint the latest.
    full_disk() {  # LOG RUN_NAME SHIM_SETTINGS...: a 2-rank run with the shim on its step-4 checkpoint
      local log=$1 name=$2
      shift 2
      run 4 "$log" env LD_PRELOAD="$shim" LB_FAILWRITE_MATCH=/out/$name/checkpoints/step_00000004.h5.tmp \
        LB_FAILWRITE_RANK=0 "$@" "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name="$name"
      [[ "$(cat out/$name/checkpoints/latest)" == step_00000002.h5 ]] || fail "latest: $(cat out/$name/checkpoints/latest)"
      [[ "$(ckpts out/$name/checkpoints)" == "latest step_00000002.h5 " ]] || fail "$name left: $(ckpts out/$name/checkpoints)"
      expect_not_in "$log" "Segmentation fault"
      expect_not_in "$log" "signal"
    }
    full_disk enospc.log c
    full_disk enospc_mid.log cm LB_FAILWRITE_SPACE=100000
    full_disk eio_mid.log ci LB_FAILWRITE_AFTER=100000 LB_FAILWRITE_ERRNO=EIO
    for r in 0 1; do
      expect_re enospc.log "^lorabench: rank $r: training stopped: .*/out/c/checkpoints/step_00000004.h5.tmp: .*No space left on device \(errno 28\)"
      expect_re enospc_mid.log "^lorabench: rank $r: training stopped: .*/out/cm/checkpoints/step_00000004.h5.tmp: flush failed \(cannot reserve the file's space: No space left on device \(errno 28\)\)"
      expect_re eio_mid.log "^lorabench: rank $r: training stopped: .*/out/ci/checkpoints/step_00000004.h5.tmp: .*Input/output error \(errno 5\)"
    done
    # The device that failed writes left libhdf5 a file it cannot close; the process says so and ends without it.
    expect_re eio_mid.log "^lorabench: .*/out/ci/checkpoints/step_00000004.h5.tmp could not be closed \(its last flush failed\)"
    run 0 verify2.txt "$lorabench" checkpoint verify $C/step_00000002.h5 out/c/checkpoints/step_00000002.h5
    expect_in verify2.txt "verdict: identical"
    "$checker" run out/c/run.h5 8 failed "No space left on device (errno 28)"
    run 0 resume_c.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=c --set checkpoint.resume=latest
    "$checker" provenance out/c/run.h5 resumed_at_step 2
    "$checker" losses out/ref/run.h5 out/c/run.h5 0
    run 0 verify8.txt "$lorabench" checkpoint verify $C/step_00000008.h5 out/c/checkpoints/step_00000008.h5
    expect_in verify8.txt "verdict: identical"
    # 2. EIO on run.h5 in mid-run: the byte budget is what a 3-step run writes to its run.h5, so a 20-step
    # run's writes fail a few steps in.
    run 0 count.log env LD_PRELOAD="$shim" LB_FAILWRITE_MATCH=/out/n/run.h5 LB_FAILWRITE_RANK=0 \
      LB_FAILWRITE_AFTER=-1 LB_FAILWRITE_REPORT="$work/run_h5_bytes" \
      "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=n --set run.steps=3 --set checkpoint.every=1
    budget=$(cat "$work/run_h5_bytes")
    [ "$budget" -gt 0 ] || fail "the counting run wrote $budget bytes to run.h5"
    rm -rf out/n
    run 4 eio.log env LD_PRELOAD="$shim" LB_FAILWRITE_MATCH=/out/n/run.h5 LB_FAILWRITE_RANK=0 \
      LB_FAILWRITE_AFTER="$budget" LB_FAILWRITE_ERRNO=EIO \
      "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=n --set run.steps=20 --set checkpoint.every=1
    for r in 0 1; do
      expect_re eio.log "^lorabench: rank $r: training stopped: .*/out/n/run.h5.*Input/output error \(errno 5\)"
    done
    expect_not_in eio.log "Segmentation fault"
    last=$(cat out/n/checkpoints/latest)
    steps_done=$((10#${last:5:8}))
    [ "$steps_done" -ge 3 ] && [ "$steps_done" -lt 20 ] || fail "latest checkpoint $last: expected one in mid-run"
    wait_unlocked out/n/run.h5
    run 0 resume_n.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=n --set run.steps=20 \
      --set checkpoint.every=1 --set checkpoint.resume=latest
    "$checker" provenance out/n/run.h5 resumed_at_step "$steps_done"
    run 0 ref20.log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=ref20 --set run.steps=20
    "$checker" losses out/ref20/run.h5 out/n/run.h5 0
    ;;
  disk_full)
    # A real full file system: the run directory on a 400 KiB tmpfs in a private mount namespace. A 2-rank run
    # that keeps every checkpoint fills it; the write that does not fit ends the run with exit 4 and the
    # reason on both ranks, no crash, no unfinished .tmp, and the checkpoint "latest" names complete and
    # verified. Needs a mount namespace (root, or unprivileged user namespaces).
    ns=()
    if unshare -m true 2>/dev/null; then ns=(unshare -m --propagation private)
    elif unshare -rm true 2>/dev/null; then ns=(unshare -rm --propagation private)
    else
      echo "SKIP: this machine gives no mount namespace (unshare -m and unshare -rm both refused), so no tmpfs to fill"
      exit 77
    fi
    mkdir -p mnt kept
    # In the namespace: mount the tmpfs, run, copy the run directory out (the tmpfs ends with the namespace).
    inner='mount -t tmpfs -o size=400k lorabench-full "$1" || exit 99; out=$2; shift 2; rc=0; "$@" || rc=$?
           cp -a "$out" kept/ && df -k "$out" >&2; exit $rc'
    run 4 full.log "${ns[@]}" bash -c "$inner" _ "$work/mnt" "$work/mnt/f" "${mpiexec[@]}" -n 2 "$lorabench" \
      "${tiny[@]}" --set run.output_dir="$work/mnt" --set run.name=f --set parallel.strategy=ddp \
      --set checkpoint.every=2 --set run.steps=40
    for r in 0 1; do
      expect_re full.log "^lorabench: rank $r: training stopped: .*/mnt/f/.*No space left on device \(errno 28\)"
    done
    expect_not_in full.log "Segmentation fault"
    expect_not_in full.log "signal"
    [[ -z "$(cd kept/f/checkpoints && ls | grep '\.tmp$' || true)" ]] || fail "left: $(ckpts kept/f/checkpoints)"
    latest=$(cat kept/f/checkpoints/latest)
    run 0 info.txt "$lorabench" checkpoint info "kept/f/checkpoints/$latest"
    expect_re info.txt "^format .*, complete$"
    ;;
  reshard)
    # Written by fsdp on 2 ranks (micro 2); resumed by single (grad_accum 2), ddp on 1 rank and fsdp on 4
    # ranks (micro 1): the same global batch of 4, losses within 1e-6 of the uninterrupted fsdp run.
    common=("${tiny[@]}" --set checkpoint.every=3)
    run 0 log "${mpiexec[@]}" -n 2 "$lorabench" "${common[@]}" --set run.name=ref --set parallel.strategy=fsdp
    from=(--set checkpoint.resume="$work/$C/step_00000003.h5")
    run 0 s1.log "$lorabench" "${common[@]}" "${from[@]}" --set run.name=s1 --set train.grad_accum=2
    run 0 d1.log "${mpiexec[@]}" -n 1 "$lorabench" "${common[@]}" "${from[@]}" --set run.name=d1 \
      --set parallel.strategy=ddp --set train.grad_accum=2
    run 0 f4.log "${mpiexec[@]}" -n 4 "$lorabench" "${common[@]}" "${from[@]}" --set run.name=f4 \
      --set parallel.strategy=fsdp --set train.micro_batch=1
    for r in s1 d1 f4; do
      "$checker" run out/$r/run.h5 $([[ $r == f4 ]] && echo 12 || echo 3) completed
      "$checker" losses out/ref/run.h5 out/$r/run.h5 1e-6
      "$checker" provenance out/$r/run.h5 resumed_at_step 3
      run 0 close_$r.txt "$lorabench" checkpoint verify --rtol 1e-5 $C/step_00000006.h5 out/$r/checkpoints/step_00000006.h5
      expect_in close_$r.txt "verdict: equal (within rtol)"
    done
    # Not bitwise: verify says so without --rtol.
    run 1 exact.txt "$lorabench" checkpoint verify $C/step_00000006.h5 out/f4/checkpoints/step_00000006.h5
    # Qwen3 (q/k norms, no q/k/v biases, head_dim 32 on hidden 64): written by fsdp on 2 ranks, resumed by a
    # single rank with grad_accum 2, losses within 1e-6 of the uninterrupted run.
    q3=("${common[@]}" --set model.preset=qwen3-tiny)
    run 0 q3.log "${mpiexec[@]}" -n 2 "$lorabench" "${q3[@]}" --set run.name=q3 --set parallel.strategy=fsdp
    run 0 q3s.log "$lorabench" "${q3[@]}" --set run.name=q3s --set train.grad_accum=2 \
      --set checkpoint.resume="$work/out/q3/checkpoints/step_00000003.h5"
    "$checker" losses out/q3/run.h5 out/q3s/run.h5 1e-6
    "$checker" provenance out/q3s/run.h5 resumed_at_step 3
    v=$(h5attr out/q3/run.h5 /metrics/summary/model_family); [[ $v == qwen3 ]] || fail "model_family = $v, expected qwen3"
    v=$(h5attr out/q3/run.h5 /metrics/summary/model); [[ $v == qwen3-tiny ]] || fail "model = $v, expected qwen3-tiny"
    ;;
  refuse)
    common=("${tiny[@]}" --set checkpoint.every=2)
    run 0 log "$lorabench" "${common[@]}" --set run.name=r --set run.steps=4
    sum=$(digest out/r/run.h5)
    # A different training: every differing field listed, nothing touched.
    run 2 diff.log "$lorabench" "${common[@]}" --set run.name=r --set checkpoint.resume=latest --set lora.r=8 \
      --set data.seq_len=64 --set model.dtype=bf16 --set train.micro_batch=1
    for text in "was written by a different training (4 fields differ)" "model.dtype: checkpoint fp32, configuration bf16" \
                "lora.r: checkpoint 4, configuration 8" "data.seq_len: checkpoint 32, configuration 64" \
                "train.global_batch: checkpoint 2, configuration 1"; do
      expect_in diff.log "$text"
    done
    [[ "$(digest out/r/run.h5)" == "$sum" && ! -e out/r/run.1.h5 ]] || fail "a refused resume changed the run directory"
    # Nothing left to run.
    run 2 done.log "$lorabench" "${common[@]}" --set run.name=r --set checkpoint.resume=latest --set run.steps=4
    expect_in done.log "leaves nothing to run"
    # The newest checkpoint with one byte of its HDF5 metadata changed (libhdf5 crashed on such files before
    # the seal), an unmarked file named like a newer one: both skipped with a warning.
    flip_byte out/r/checkpoints/step_00000004.h5 700
    echo partial >out/r/checkpoints/step_00000005.h5
    run 0 skip.log "$lorabench" "${common[@]}" --set run.name=r --set checkpoint.resume=latest --set run.steps=6 \
      --set run.quiet=false
    expect_in skip.log "skipping checkpoint $work/out/r/checkpoints/step_00000005.h5: damaged: 8 bytes, too short"
    expect_in skip.log "skipping checkpoint $work/out/r/checkpoints/step_00000004.h5: damaged: the file's hash"
    expect_in skip.log "resume: $work/out/r/checkpoints/step_00000002.h5, step 2"
    "$checker" run out/r/run.h5 4 completed
    # step 4 was written again by the resumed run.
    run 0 info4.txt "$lorabench" checkpoint info out/r/checkpoints/step_00000004.h5
    # Nothing usable: an error, not a fresh start.
    mkdir -p out/empty/checkpoints
    run 2 none.log "$lorabench" "${common[@]}" --set run.name=empty --set checkpoint.resume=latest
    expect_in none.log "checkpoint.resume = latest: no complete checkpoint in"
    run 2 missing.log "$lorabench" "${common[@]}" --set run.name=new --set checkpoint.resume=latest
    [[ ! -e out/new ]] || fail "a failed resume created the run directory"
    run 2 path.log "$lorabench" "${common[@]}" --set run.name=p --set checkpoint.resume="$work/out/r/checkpoints/step_00000005.h5"
    expect_in path.log "checkpoint.resume = $work/out/r/checkpoints/step_00000005.h5: cannot resume ($work/out/r/checkpoints/step_00000005.h5: damaged: 8 bytes, too short"
    # Combinations that cannot work.
    run 2 ow.log "$lorabench" "${common[@]}" --set run.name=r --set checkpoint.resume=latest --set run.overwrite=true
    expect_in ow.log "run.overwrite"
    run 2 rep.log "$lorabench" "${common[@]}" --set run.name=x --set run.repeat=2
    expect_in rep.log "checkpoint.every: checkpoints need run.repeat = 1"
    ;;
  nan)
    # A NaN loss on rank 1 at step 3: every rank stops in that step (exit 3), no checkpoint after it,
    # run.h5 says failed and why, with every step up to the failing one.
    run 3 log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set run.name=n --set parallel.strategy=ddp \
      --set checkpoint.every=2 --set fault.nan_at_step=3 --set fault.nan_rank=1
    [[ "$(ckpts out/n/checkpoints)" == "latest step_00000002.h5 " ]] || fail "checkpoints: $(ckpts out/n/checkpoints)"
    [[ "$(cat out/n/checkpoints/latest)" == step_00000002.h5 ]] || fail "latest: $(cat out/n/checkpoints/latest)"
    "$checker" run out/n/run.h5 8 failed "non-finite loss on 1 rank(s) at step 3"
    ;;
  *) fail "unknown case $case_name" ;;
esac
echo ok
