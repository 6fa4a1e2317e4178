#!/usr/bin/env bash
# End-to-end cases for training runs (tests/e2e/train.cmake).
#   train_e2e.sh CASE LORABENCH CHECKER WORKDIR SOURCE_DIR MPIEXEC...
set -euo pipefail
case_name=$1 lorabench=$2 checker=$3 work=$4 src=$5
shift 5
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"

tiny=("$src/inputs/tiny.ini" --set run.output_dir="$work/out" --set run.quiet=true)
case "$case_name" in
  single)
    run 0 log "$lorabench" "${tiny[@]}" --set run.name=single
    "$checker" train-run out/single/run.h5 1 6
    [[ -f out/single/adapter/adapter_model.safetensors && -f out/single/adapter/adapter_config.json ]] ||
      fail "adapter not written"
    h5dump -H out/single/run.h5 >h5dump.txt
    for name in config provenance ranks metrics steps summary validation; do expect_in h5dump.txt "\"$name\""; done
    # Every attribute the file has is on docs/hdf5-schema.md (here, with the prediction and in plan, below).
    "$checker" schema-doc out/single/run.h5 "$src/docs/hdf5-schema.md"
    # The attention kernel that ran (model.cuda_attention chooses on a GPU; tiny.ini is fp32, for which the CPU
    # runs libtorch's flash kernel: model.cpu_attention's blocked kernel is bf16 only).
    v=$(h5attr out/single/run.h5 /provenance/attention_kernel); [[ $v == cpu_flash ]] || fail "attention_kernel = '$v'"
    ;;
  ddp)
    run 0 log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set run.name=ddp --set parallel.strategy=ddp
    "$checker" train-run out/ddp/run.h5 2 6
    # One line per rank at start, rank 0's effective-config table once.
    [[ $(count_in log "local rank") -eq 2 ]] || { cat log; fail "expected one start line per rank"; }
    # A calibrated peak is the job's: the best of the ranks' figures, with their range.
    run 0 log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set run.name=ddp-cal --set parallel.strategy=ddp \
      --set profile.peak_gflops=0 --set profile.mem_bandwidth_gbs=0 --set run.steps=1 --set run.warmup_steps=0 \
      --set run.quiet=false
    line=$(grep -E "^peak: .*calibrated" log) || { cat log; fail "no calibrated peak line"; }
    re="^peak: ([0-9.]+) GFLOP/s per rank .*; the best of 2 ranks' calibrations \(([0-9.]+) to ([0-9.]+) GFLOP/s\)\)$"
    [[ $line =~ $re ]] || fail "peak line: '$line'"
    [[ ${BASH_REMATCH[1]} == "${BASH_REMATCH[3]}" ]] || fail "the job's peak is not the best rank's: '$line'"
    # The memory bandwidth for the roofline: a triad measured on both ranks at once, the median rank's.
    line=$(grep -E "^memory bandwidth: .*measured: STREAM-style triad" log) || { cat log; fail "no measured bandwidth"; }
    re="^memory bandwidth: ([0-9.]+) GB/s per rank .*; the median of 2 ranks measured at once \(([0-9.]+) to ([0-9.]+) GB/s\)\); a step moves "
    [[ $line =~ $re ]] || fail "bandwidth line: '$line'"
    python3 -c "import sys; b, lo, hi = map(float, sys.argv[1:]); sys.exit(0 if lo <= b <= hi and lo > 0.1 else 1)" \
      "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}" || fail "bandwidth out of its ranks' range: '$line'"
    [[ $(h5attr out/ddp-cal/run.h5 /metrics/summary/mem_bandwidth_source) == measured ]] ||
      fail "mem_bandwidth_source is not measured"
    ;;
  errors)
    printf '[run]\nsteps = 3\n[train]\nlearning_rate = 1e-3\n' >bad.ini
    run 2 log "${mpiexec[@]}" -n 2 "$lorabench" bad.ini
    expect_in log "bad.ini:4: train.learning_rate: unknown key"
    [[ $(count_in log "unknown key") -eq 1 ]] || { cat log; fail "the error must be printed once, by rank 0"; }
    printf '[model]\ndtype = fp8\n' >bad2.ini
    run 2 log "$lorabench" bad2.ini
    expect_in log "bad2.ini:2: model.dtype: expected one of fp32|bf16"
    run 2 log "$lorabench" missing.ini
    expect_in log "missing.ini: cannot read the input file"
    run 2 log "$lorabench" "${tiny[@]}" --set train.micro_batch=zero
    expect_in log "--set: train.micro_batch: expected an integer"
    run 2 log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set parallel.strategy=single
    expect_in log "parallel.strategy: single runs on one rank but the job has 2 ranks"
    [[ ! -e out ]] || fail "a configuration error must not create outputs"
    ;;
  existing)
    run 0 log "$lorabench" "${tiny[@]}" --set run.name=r --set run.steps=2 --set run.warmup_steps=0
    sum=$(sha256sum out/r/run.h5)
    run 2 log "$lorabench" "${tiny[@]}" --set run.name=r --set run.steps=2 --set run.warmup_steps=0
    expect_in log "run.name: $work/out/r already exists"
    [[ "$(sha256sum out/r/run.h5)" == "$sum" ]] || fail "the existing run file changed"
    run 0 log "$lorabench" "${tiny[@]}" --set run.name=r --set run.steps=2 --set run.warmup_steps=0 \
      --set run.overwrite=true
    "$checker" train-run out/r/run.h5 1 2
    [[ ! -e out/r/.lorabench.lock ]] || fail "a finished run left its lock file"
    # A live run's directory is neither deleted (run.overwrite) nor continued (checkpoint.resume = auto) by a
    # second run, which names the holder; once the first is gone (even by SIGKILL) the same command works.
    set -m  # the background job keeps the default signal dispositions
    "$lorabench" "${tiny[@]}" --set run.name=live --set run.steps=100000 --set run.quiet=false >live.log 2>&1 &
    pid=$!
    for _ in $(seq 600); do grep -q "^step 3/" live.log && break; sleep 0.1; done
    grep -q "^step 3/" live.log || { cat live.log; fail "the live run did not start"; }
    run 2 over.log "$lorabench" "${tiny[@]}" --set run.name=live --set run.steps=2 --set run.warmup_steps=0 \
      --set run.overwrite=true
    expect_in over.log "run.name: $work/out/live is in use by a live run (pid $pid on host $(hostname), started "
    expect_in over.log "run.overwrite = true would delete it under that run"
    run 2 auto.log "$lorabench" "${tiny[@]}" --set run.name=live --set checkpoint.resume=auto
    expect_in auto.log "is in use by a live run (pid $pid on host"
    kill -0 $pid || fail "the live run is gone"
    [[ -f out/live/run.h5 ]] || fail "the live run's file was deleted"
    kill -KILL $pid; wait $pid || true
    set +m
    wait_unlocked out/live/run.h5
    run 0 log "$lorabench" "${tiny[@]}" --set run.name=live --set run.steps=2 --set run.warmup_steps=0 \
      --set run.overwrite=true
    "$checker" train-run out/live/run.h5 1 2
    ;;
  tp)
    # Tensor parallelism (parallel.tp) trains what one rank trains: tp 2 on 2 ranks against single, tp 2 x ddp 2 on
    # 4 ranks against single with the same global batch (grad_accum 2); held-out losses equal to 1e-5 (through
    # the tensor-parallel forward), the adapter unsplit (every tensor the single run's shape, values to 1e-5); a
    # tp checkpoint resumes as single and reaches the same end.
    ev=(--set train.eval_every=3 --set data.eval_samples=8 --set run.warmup_steps=0)
    run 0 single.log "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=single
    run 0 single2.log "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=single2 --set train.grad_accum=2
    run 0 tp2.log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=tp2 --set parallel.tp=2 \
      --set checkpoint.every=3
    run 0 tp2dp2.log "${mpiexec[@]}" -n 4 "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=tp2dp2 --set parallel.tp=2 \
      --set parallel.strategy=ddp
    "$checker" train-run out/tp2/run.h5 2 6
    "$checker" train-run out/tp2dp2/run.h5 4 6
    run 0 eq.txt "$checker" eval-equal 1e-5 out/single/run.h5 out/tp2/run.h5
    run 0 eq2.txt "$checker" eval-equal 1e-5 out/single2/run.h5 out/tp2dp2/run.h5
    [[ $(h5attr out/tp2dp2/run.h5 /metrics/summary/mesh) == "dp_replicate 2 x dp_shard 1 x tp 2 (tensor-parallel groups within a node)" ]] ||
      fail "mesh: $(h5attr out/tp2dp2/run.h5 /metrics/summary/mesh)"
    [[ $(h5attr out/tp2dp2/run.h5 /provenance/mesh_coords) == "0:0.0.0 1:0.0.1 2:1.0.0 3:1.0.1" ]] ||
      fail "mesh_coords: $(h5attr out/tp2dp2/run.h5 /provenance/mesh_coords)"
    python3 - out/single/adapter/adapter_model.safetensors out/tp2/adapter/adapter_model.safetensors <<'PY' ||
import json, struct, sys
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]
        assert v["dtype"] == "F32", (k, v["dtype"])
        buf = raw[8 + n + a:8 + n + b]
        out[k] = (v["shape"], struct.unpack("<%df" % (len(buf) // 4), buf))
    return out
ref, got = load(sys.argv[1]), load(sys.argv[2])
assert sorted(ref) == sorted(got), "other tensor names"
# As tests/mpi/test_strategies.cpp compares weights: 1e-5 relative over all of them, 1e-3 element-wise (an
# element whose gradients were mostly rounding moves by a fraction of the learning rate either way under Adam).
worst, diff2, ref2 = 0.0, 0.0, 0.0
for k in ref:
    assert ref[k][0] == got[k][0], (k, ref[k][0], got[k][0])
    scale = max(max(abs(x) for x in ref[k][1]), 1e-12)
    worst = max(worst, max(abs(a - b) for a, b in zip(ref[k][1], got[k][1])) / scale)
    diff2 += sum((a - b) ** 2 for a, b in zip(ref[k][1], got[k][1]))
    ref2 += sum(b * b for b in ref[k][1])
rel = (diff2 / ref2) ** 0.5
print("adapter: %d tensors, relative difference %.2e, worst element %.2e of its tensor's largest" % (len(ref), rel, worst))
sys.exit(0 if rel <= 1e-5 and worst <= 1e-3 else 1)
PY
      fail "the tp adapter is not the single run's"
    # tp 2's checkpoint after step 3, resumed by one rank (the state is the full model's in every checkpoint), ends
    # where single's own checkpoint resumed ends.
    ck=out/tp2/checkpoints/step_00000003.h5
    [[ -f $ck ]] || fail "no tp checkpoint after step 3"
    run 0 sck.log "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=sck --set checkpoint.every=3
    run 0 sres.log "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=sres \
      --set checkpoint.resume=out/sck/checkpoints/step_00000003.h5
    run 0 resumed.log "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=resumed --set checkpoint.resume="$ck"
    [[ $(h5attr out/resumed/run.h5 /metrics/summary/resumed_at_step) == 3 ]] || fail "the single run did not resume at step 3"
    run 0 eq3.txt "$checker" eval-equal 1e-5 out/sres/run.h5 out/resumed/run.h5
    # Refused with the key named: a model whose heads tp cannot split, and tp with a sharded strategy.
    run 2 bad.log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set parallel.tp=2 --set model.preset=qwen3.5-tiny
    expect_in bad.log "parallel.tp"
    run 2 bad2.log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set parallel.tp=2 --set parallel.strategy=fsdp
    expect_in bad2.log "parallel.tp: tensor parallelism combines with parallel.strategy single (one group) or ddp"
    ;;
  eval)
    # Held-out evaluation (train.eval_every) is the same computation under every strategy: the same global
    # batch (single with grad_accum 2 = 2 ranks x 1), 10 held-out samples (4 per evaluation step: the last
    # step is partial), fp32: equal to 1e-5.
    ev=(--set train.eval_every=3 --set data.eval_samples=10 --set run.warmup_steps=0 --set run.quiet=false)
    run 0 single.log "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=single --set train.grad_accum=2
    expect_re single.log "eval  after step 3: loss [0-9.]+  perplexity [0-9.]+  \(10 samples, [0-9]+ tokens"
    expect_re single.log "eval  after step 6: loss"
    runs=()
    for s in ddp zero1 zero2 fsdp; do
      run 0 $s.log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=$s --set parallel.strategy=$s
      runs+=(out/$s/run.h5)
    done
    run 0 eq.txt "$checker" eval-equal 1e-5 out/single/run.h5 "${runs[@]}"
    # The check can fail: another seed trains other weights.
    run 0 seed.log "$lorabench" "${tiny[@]}" "${ev[@]}" --set run.name=seed --set train.grad_accum=2 --set run.seed=7
    run 1 neq.txt "$checker" eval-equal 1e-5 out/single/run.h5 out/seed/run.h5
    # A held-out part of a dataset file: the last 10% of sft_toy's records, not trained on.
    run 0 frac.log "$lorabench" "${tiny[@]}" --set run.name=frac --set data.format=alpaca \
      --set data.path="$src/inputs/data/sft_toy.jsonl" --set data.eval_fraction=0.1 --set train.eval_every=6 --set run.quiet=false \
      --set data.seq_len=256
    expect_re frac.log "evaluation set: sft alpaca .*: 22 examples"
    expect_re frac.log "data: sft alpaca .*: 200 examples"
    expect_re frac.log "eval  after step 6: loss [0-9]+\.[0-9]+  perplexity [0-9]"
    # Keys that do not go together.
    run 2 bad.log "$lorabench" "${tiny[@]}" --set run.name=bad --set train.eval_every=2
    expect_in bad.log "data.eval_samples: train.eval_every with synthetic data needs data.eval_samples > 0"
    run 2 bad2.log "$lorabench" "${tiny[@]}" --set run.name=bad --set data.eval_samples=4
    expect_in bad2.log "train.eval_every: is 0 but a held-out set is configured"
    ;;
  plan)
    # lorabench plan: every strategy at 1, 2 and 4 ranks, with the probe, tensor parallelism where tiny's heads
    # split (tp 2 on 2 ranks, tp 2 x dp 2 and tp 4 on 4), each world's fitting rows ranked; single's tensor peak
    # is the measured one exactly (the probe runs the same code) and a run records the same prediction.
    run 0 plan.md "$lorabench" plan "$src/inputs/tiny.ini" --tsv plan.tsv
    for row in "single | 1" "ddp | 2" "zero1 | 2" "zero2 | 2" "fsdp | 2" "ddp | 4" "fsdp | 4" \
               "tp2+single (dp 1 x tp 2) | 2" "tp2+ddp (dp 2 x tp 2) | 4" "tp4+single (dp 1 x tp 4) | 4"; do
      expect_in plan.md "| $row |"
    done
    expect_in plan.md "Activations and time from the probe: 1- and 2-layer models, micro-batch 2 x 32 tokens"
    expect_re plan.md "^- Ranked on 4 ranks \(predicted step, fitting rows\): 1\. "
    [[ $(wc -l <plan.tsv) -eq 13 ]] || fail "plan.tsv: expected a header and 12 rows"
    predicted=$(awk -F'\t' '$1 == "single" { print $7 }' plan.tsv)
    run 0 log "$lorabench" "${tiny[@]}" --set run.name=measured --set run.predict=true
    measured=$(h5attr out/measured/run.h5 /metrics/summary/mem_peak_bytes_max)
    recorded=$(h5attr out/measured/run.h5 /metrics/summary/predicted_tensor_peak_bytes)
    "$checker" schema-doc out/measured/run.h5 "$src/docs/hdf5-schema.md"
    # (h5dump prints 6 significant digits)
    awk -v p="$predicted" -v m="$measured" -v r="$recorded" \
      'function d(a, b) { return (a > b ? a - b : b - a) / b } BEGIN { exit !(d(p, m) < 1e-5 && d(r, m) < 1e-5) }' ||
      fail "single's predicted tensor peak $predicted (recorded $recorded) is not the measured $measured"
    # The same on a Qwen3 shape (the q/k norms, their saved inputs and statistics); its lower bound stays below.
    run 0 plan3.md "$lorabench" plan "$src/inputs/tiny.ini" --set model.preset=qwen3-tiny -n 1 --strategy single \
      --tsv plan3.tsv
    run 0 plan3lb.md "$lorabench" plan "$src/inputs/tiny.ini" --set model.preset=qwen3-tiny -n 1 --strategy single \
      --no-probe --tsv plan3lb.tsv
    predicted3=$(awk -F'\t' '$1 == "single" { print $7 }' plan3.tsv)
    lower3=$(awk -F'\t' '$1 == "single" { print $7 }' plan3lb.tsv)
    run 0 log3 "$lorabench" "${tiny[@]}" --set model.preset=qwen3-tiny --set run.name=measured3
    measured3=$(h5attr out/measured3/run.h5 /metrics/summary/mem_peak_bytes_max)
    awk -v p="$predicted3" -v m="$measured3" -v l="$lower3" \
      'BEGIN { exit !((p > m ? p - m : m - p) / m < 1e-5 && l <= m) }' ||
      fail "qwen3-tiny: predicted tensor peak $predicted3, lower bound $lower3, measured $measured3"
    # Without the probe: the lower bound, no time. Bad arguments are configuration errors.
    run 0 noprobe.md "$lorabench" plan "$src/inputs/tiny.ini" --no-probe -n 2 --strategy fsdp
    expect_in noprobe.md "No probe: activations are the lower bound"
    run 2 bad.txt "$lorabench" plan "$src/inputs/tiny.ini" -n 0
    expect_in bad.txt "plan: -n expects rank counts >= 1"
    run 2 bad.txt "$lorabench" plan "$src/inputs/tiny.ini" --strategy zero3
    expect_in bad.txt 'unknown strategy "zero3"'
    # A run that cannot fit is refused before anything is written, with the numbers.
    run 2 huge.txt "$lorabench" "${tiny[@]}" --set run.name=huge --set data.seq_len=32768 --set train.micro_batch=2048
    expect_re huge.txt "this run cannot fit: each rank needs at least [0-9.]+ [GT]iB \(model state"
    expect_re huge.txt "and this node has [0-9.]+ [GMT]iB available for 1 rank "
    [[ ! -e out/huge ]] || fail "a refused run created its directory"
    # A run that the lower bound lets start but whose probed prediction does not fit (a node taken to have
    # 200 MiB) is refused before its first step: exit 2, the numbers, run.h5 failed with the message.
    run 2 tight.txt "$lorabench" "${tiny[@]}" --set run.name=tight --set run.predict=true \
      --set fault.memory_available_mb=200
    expect_re tight.txt "the run's prediction says it cannot fit: each rank needs [0-9.]+ MiB \(resident memory"
    expect_in tight.txt "and this node has 200.00 MiB per rank"
    expect_not_in tight.txt "this run cannot fit: each rank needs at least"
    [[ $(h5attr out/tight/run.h5 /status) == failed ]] || fail "status $(h5attr out/tight/run.h5 /status)"
    h5dump -a /status_message out/tight/run.h5 >tight-status.txt
    expect_in tight-status.txt "the run's prediction says it cannot fit"
    [[ $(h5dump -d /metrics/steps out/tight/run.h5 | grep -c '^   (') -eq 0 ]] || fail "the refused run trained"
    ;;
  help)
    run 0 log "$lorabench" --help
    expect_in log "subcommands:"
    run 0 log "$lorabench" train --help
    expect_in log "parallel.strategy"
    run 2 log "$lorabench"
    run 0 version.txt "$lorabench" --version
    expect_re version.txt '^lorabench [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-f]{40}(-dirty)?\)$'
    # A mistyped command is called one, with the list; a missing input file is still a missing file.
    run 2 trian.txt "$lorabench" trian
    expect_in trian.txt 'unknown command "trian" (commands: train, tokenize, comm, doctor, forward, keys, checkpoint, plan;'
    run 2 missing.txt "$lorabench" nothere.ini
    expect_in missing.txt "nothere.ini: cannot read the input file"
    ;;
  keys)
    # docs/input-reference.md carries exactly the rows that `lorabench keys --markdown` prints.
    run 0 keys.md "$lorabench" keys --markdown
    grep '^| `' keys.md >want.txt
    grep '^| `' "$src/docs/input-reference.md" >have.txt || true
    diff want.txt have.txt >keys.diff ||
      { cat keys.diff >&2; fail "docs/input-reference.md is out of date: regenerate its table with lorabench keys --markdown"; }
    ;;
  verdict)
    # The run file's check of the trainable state (docs/strategies.md, "Checking the state at the end of a
    # run"): each strategy passes it on 2 ranks; with fault.drift_rank = 1 (rank 1's own state moves by one
    # ulp after the final gather) it fails, naming rank 1, and the verdict is INVALID.
    short=(--set run.steps=2 --set run.warmup_steps=0)
    for s in ddp zero1 zero2 fsdp; do
      check=shards_consistent
      [[ $s == ddp ]] && check=replicas_identical
      run 0 $s.log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" "${short[@]}" --set run.name=$s \
        --set parallel.strategy=$s
      run 0 $s.txt "$checker" validation-check out/$s/run.h5 $check passed
      run 0 $s-drift.log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" "${short[@]}" --set run.name=$s-drift \
        --set parallel.strategy=$s --set fault.drift_rank=1
      expect_in $s-drift.log "fault injection: rank 1 moved its own trainable state by one ulp"
      run 0 $s-drift.txt "$checker" validation-check out/$s-drift/run.h5 $check failed "rank 1"
      expect_in $s-drift.txt "verdict INVALID"
    done
    # fsdp's failure names the rank whose shard is not what the gather returned.
    expect_in fsdp-drift.txt "rank 1's own shard is not its slice of the gathered state"
    # Tensor parallelism (tp 2, one group): each rank's part against its slice of the gathered state.
    run 0 tp.log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" "${short[@]}" --set run.name=tp --set parallel.tp=2
    run 0 tp.txt "$checker" validation-check out/tp/run.h5 replicas_identical passed
    run 0 tp-drift.log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" "${short[@]}" --set run.name=tp-drift \
      --set parallel.tp=2 --set fault.drift_rank=1
    run 0 tp-drift.txt "$checker" validation-check out/tp-drift/run.h5 replicas_identical failed "rank 1"
    expect_in tp-drift.txt "rank 1's part of the model is not its slice of the gathered state"
    # One rank of single has nothing to compare with: refused before anything runs.
    run 2 single.log "$lorabench" "${tiny[@]}" --set run.name=single --set fault.drift_rank=0
    expect_in single.log "fault.drift_rank: one rank of single has no other copy of the state to disagree with"
    ;;
  nan)
    # A NaN on rank 1 at step 3: every rank stops in that step, exit code 3, the run file says why.
    run 3 log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set run.name=nan --set parallel.strategy=ddp \
      --set fault.nan_at_step=3 --set fault.nan_rank=1
    expect_in log "non-finite loss on 1 rank(s) at step 3"
    h5dump -a /status -a /status_message out/nan/run.h5 >attrs.txt
    expect_in attrs.txt '"failed"'
    expect_in attrs.txt "non-finite loss on 1 rank(s) at step 3"
    h5dump -d /metrics/steps out/nan/run.h5 >steps.txt  # steps 0..3 of both ranks were flushed
    [[ $(grep -c '^   (' steps.txt) -eq 8 ]] || { cat steps.txt; fail "expected 8 step rows"; }
    # With on_nonfinite = skip the step's update is dropped on every rank and the run completes.
    run 0 log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set run.name=skip --set parallel.strategy=ddp \
      --set fault.nan_at_step=3 --set fault.nan_rank=1 --set train.on_nonfinite=skip
    h5dump -a /metrics/summary/skipped_steps out/skip/run.h5 >skip.txt
    expect_in skip.txt "(0): 1"
    # A step with no token to train on (both ranks' examples of step 0 have their answers cut by data.seq_len):
    # every rank stops in that step with exit 2; with on_empty_step = skip the run goes on and is INVALID.
    long='Tell me, in many words, why the sky is blue and the grass is green, and why the sea is salty.'
    for i in 1 2; do printf '{"instruction": "%s %s", "input": "", "output": "Light."}\n' "$long" "$long"; done >d.jsonl
    for i in 1 2; do printf '{"instruction": "Hi?", "input": "", "output": "Hello there."}\n'; done >>d.jsonl
    sft=(--set data.format=auto --set data.path=d.jsonl --set data.shuffle=false --set data.seq_len=80
         --set data.tokenizer="$src/tests/fuzz/corpus/tokenizer/qwen2.5-tiny.json" --set train.micro_batch=1
         --set run.steps=2 --set run.warmup_steps=0 --set parallel.strategy=ddp)
    run 2 log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" "${sft[@]}" --set run.name=empty
    expect_in log "no token to train on in the global batch at step 0"
    run 0 log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" "${sft[@]}" --set run.name=empty-skip \
      --set train.on_empty_step=skip
    h5dump -a /metrics/summary/empty_steps out/empty-skip/run.h5 >empty.txt
    expect_in empty.txt "(0): 1"
    run 0 empty-check.txt "$checker" validation-check out/empty-skip/run.h5 tokens_trained failed "1 step(s)"
    expect_in empty-check.txt "verdict INVALID"
    ;;
  trace)
    run 0 log "${mpiexec[@]}" -n 2 "$lorabench" "${tiny[@]}" --set run.name=trace --set parallel.strategy=fsdp \
      --set profile.trace=true
    for r in 0 1; do
      "$checker" trace out/trace/trace_rank$r.json forward backward optimizer "gradient sync" step \
        "layers.0 fwd" "layers.1 bwd" "embed fwd"
    done
    ;;
  forward)
    # lorabench forward against transformers and PEFT (tests/fixtures): logits and loss.
    fx="$src/tests/fixtures"
    ids="37,235,140,72,255,137,203,133,79,192,144;129,204,71,237,252,134,25,178,20,254,101"
    labels="-100,-100,-100,72,255,137,203,133,79,192,144;129,204,71,237,252,134,25,178,20,254,101"
    run 0 log "$lorabench" forward --model "$fx/qwen2-tiny" --ids "$ids" --labels "$labels" --out base.safetensors
    "$checker" forward base.safetensors "$fx/qwen2-tiny/reference.safetensors" 1e-5
    run 0 log "$lorabench" forward --model "$fx/qwen2-tiny" --adapter "$fx/qwen2-tiny-lora" --ids "$ids" \
      --labels "$labels" --out lora.safetensors
    "$checker" forward lora.safetensors "$fx/qwen2-tiny-lora/reference_lora.safetensors" 1e-5
    run 2 log "$lorabench" forward --model "$fx/qwen2-tiny" --ids "1,2;3" --out x.safetensors
    expect_in log "every row needs the same length"
    ;;
  *) fail "unknown case $case_name" ;;
esac
echo ok
