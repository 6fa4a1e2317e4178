#!/usr/bin/env bash
# bench_peers_e2e.sh CASE PYTHON LORABENCH SOURCE_DIR WORK_DIR (tests/e2e/bench_peers.cmake)
#   valid     scripts/bench.sh --quick must pass the step-0 loss check and print both sides' rows, the host
#             noise before and after (bench/host_noise.py, which refuses a measurement of 0 s), lorabench's
#             attention kernel and the --lorabench-set keys; its --evidence file must name the run file's
#             sha256 and summary, and the page scripts/results-doc.py makes of it only numbers it holds
#   qwen3     --quick --model qwen3-0.6b: the Qwen3 snapshot (q/k norms, no q/k/v biases, head_dim 32 on
#             hidden 64) through both sides, the step-0 check passing and the qwen3-tiny rows in the table
#   qwen3_5   --quick --model qwen3.5-0.8b: the same on the Qwen3.5 snapshot (three Gated DeltaNet layers and a
#             gated full-attention one; the peer on transformers' torch fallback), both sides training adapters
#             on the linear layers' projections as well
#   mismatch  the same with the peer on another seed's tokens must fail with INVALID; --lorabench-set refuses a
#             key the benchmark sets and passes the others to lorabench
#   sweep     run_bench's "does not fit" classifier on the real messages (lorabench's refusal, ATen's allocator)
#             and on a failure that is not memory; then --quick --sweep-batch --sweep-max 2 --dtype fp32: both
#             sides fit 2, the sweep line says so and the table gains the tiny-fp32-b2 rows, every side in
#             fp32 (the frame too) with the fp32 loss tolerance; and the full bf16 CPU table is refused on a
#             CPU without AVX-512 (benchlib.cpu_bf16_gemm_native on given flags), the fp32 one is not
#   deepspeed --quick --deepspeed: lorabench zero2 against DeepSpeed ZeRO-2, lorabench fsdp against ZeRO-3, ZeRO-3
#             with the optimizer and with the parameters offloaded (2 ranks each): the step-0 check VALID for
#             every side, every row; the elements per step of both ZeRO-2 sides equal within 1% (the same gradient
#             volume, counted by lorabench and by DeepSpeed's comms logger; DeepSpeed reduces bf16 in bf16);
#             the ZeRO-3 sides gather the frozen weights, lorabench's fsdp does not (its bytes a fraction of
#             theirs); each side's predicted memory
#             and ratio, the targets and one ds_config per DeepSpeed side (with its stage and offloads)
#   crossover bench/hybrid_crossover.py on Qwen3.5-tiny's widths (one layer of each kind, T = 32 and 64): both
#             kinds train, their run files name the kind, the table, the crossover line and the evidence file,
#             which scripts/results-doc.py renders
#   profiles  lorabench-profile-ops (LORABENCH is then its path; a mistyped flag is refused, exit 2) and
#             bench/profile_peer.py (eager, compiled, fp32, FSDP2 on 2 ranks; --device cuda refused without a
#             GPU), and scripts/gpu_check.sh profile with both on the CPU
#             on the tiny shape: each prints a group table with GEMMs and an attention group (libtorch's flash
#             kernels; lorabench's blocked kernel where the CPU has AVX-512 BF16)
#             (and, compiled, torch.compile's generated kernels), adding up to the step; and
#             bench/attention_cpu.py at T = 64: its check against the fp64 formula and its eight rows; and
#             bench/prepacked_gemm.py on one weight of each shape: its ten rows (or why it measures nothing)
set -euo pipefail
case_name="$1" py="$2" lorabench="$3" src="$4" work="$5"
mkdir -p "$work"
export LORABENCH_BENCH_MODELS="$work/models"  # the tiny snapshot, shared by both cases
out="$work/$case_name.out" err="$work/$case_name.err"
# The peers' dtype: bf16 where libtorch runs bf16 GEMMs with oneDNN (AVX-512), fp32 elsewhere. On a CPU
# without AVX-512 the peer's bf16 GEMMs are libtorch's reference loops: the tiny shape's vocabulary head makes
# one peer step about 11 s there, and these cases took 120-221 s each in bf16 against 43-80 s in fp32 on an
# AVX2-only EPYC core. What the cases check (the equal-work check, the tables, the profilers' groups) is the
# same code in either dtype; scripts/bench.sh refuses the full bf16 CPU table on such a CPU for that reason.
dt=fp32
"$py" -c "import sys; sys.path.insert(0, '$src/bench'); import benchlib; sys.exit(0 if benchlib.cpu_bf16_gemm_native() else 1)" && dt=bf16
echo "bench_peers_e2e.sh: the peers run in $dt on this CPU"
quick=("$py" "$src/bench/run_bench.py" --lorabench "$lorabench" --quick --device cpu)
cmd=("${quick[@]}" --dtype "$dt")
case "$case_name" in
  qwen3|qwen3_5)
    if [[ $case_name == qwen3 ]]; then model=qwen3-0.6b tiny=qwen3-tiny type=qwen3 family=Qwen3
    else model=qwen3.5-0.8b tiny=qwen3.5-tiny type=qwen3_5_text family=Qwen3.5; fi
    "${cmd[@]}" --model "$model" --json "$work/$case_name.json" >"$out" 2>"$err" ||
      { cat "$out" "$err"; echo "FAIL: the quick $family benchmark failed"; exit 1; }
    grep -q "(checked: VALID)" "$out" || { cat "$out"; echo "FAIL: no VALID step-0 check"; exit 1; }
    for side in "lorabench single" "hf-eager"; do
      grep -qE "^\| $tiny-$dt \| $side \| 1 \|" "$out" || { cat "$out"; echo "FAIL: no $tiny-$dt row of $side"; exit 1; }
    done
    grep -q "\"model_type\": \"$type\"" "$LORABENCH_BENCH_MODELS"/$tiny-seed1234-v*/config.json ||
      { echo "FAIL: the snapshot is not a $family one"; exit 1; }
    if [[ $case_name == qwen3_5 ]]; then
      # Both sides train adapters on the linear-attention layers' projections too: lorabench's run file and the
      # peer's parameter count say so (r 16 on every projection of both layer kinds and the MLP).
      "$py" - "$work/$case_name.json" "$src/bench" <<'PY' || exit 1
import json, sys
sys.path.insert(0, sys.argv[2])
from equal_work import hf_config, lorabench_targets
runs = json.load(open(sys.argv[1]))["results"][0]["runs"]
import frame
# r 16 on the projections of both layer kinds and the MLP (frame.layer_projections: the linear layers' in_proj_qkv,
# in_proj_z, out_proj, the full layer's q (with its gate), k, v, o; not in_proj_b and in_proj_a, which map to
# Qwen3.5-tiny's 4 value heads, fewer than r)
cfg = hf_config("qwen3.5-tiny")
want = lorabench_targets(cfg, 16)
if want != ["q", "k", "v", "o", "gate", "up", "down", "in_proj_qkv", "in_proj_z", "out_proj"]:
    sys.exit(f"FAIL: the benchmark's targets on qwen3.5-tiny are {want}")
names = {"in_proj_qkv", "in_proj_z", "out_proj", "q", "k", "v", "o", "gate", "up", "down"}
lora = sum(16 * (i + o) for layer in frame.layer_projections(cfg) for n, (i, o) in layer.items() if n in names)
ours = int(runs["lorabench"][0]["extra"]["run_file"]["summary"]["trainable_params"])
peer = runs["eager"][0]["extra"].get("trainable")
if (ours, peer) != (lora, lora):
    sys.exit(f"FAIL: lorabench trains {ours} and the peer {peer} parameters; adapters on every projection are {lora}")
print(f"ok: both sides train the {','.join(want)} adapters ({lora} parameters)")
PY
    fi
    echo "ok: $family's quick table is VALID"
    ;;
  valid)
    rm -rf "$work/evidence"
    "${cmd[@]}" --json "$work/valid.json" --evidence "$work/evidence" --lorabench-set model.fused_head=true >"$out" 2>"$err" ||
      { cat "$out" "$err"; echo "FAIL: the quick benchmark failed"; exit 1; }
    # The table names lorabench's attention kernel (from its run files: in bf16 its blocked kernel where the CPU
    # has AVX-512 BF16, libtorch's flash kernel elsewhere and in fp32) and any key given beyond the benchmark's.
    kernel=cpu_flash
    [[ $dt == bf16 ]] && grep -qw avx512_bf16 /proc/cpuinfo && kernel=cpu_blocked
    grep -qF -- "- lorabench's attention kernel (its run files' /provenance/attention_kernel): $kernel" "$out" ||
      { cat "$out"; echo "FAIL: no attention kernel line naming $kernel"; exit 1; }
    grep -qF -- "- lorabench ran with these keys beyond the benchmark's (--lorabench-set): \`model.fused_head=true\`" "$out" ||
      { cat "$out"; echo "FAIL: the --lorabench-set key is not named in the table"; exit 1; }
    # --json (rewritten after every run, so that a cut-off benchmark keeps its finished runs) ends complete.
    "$py" - "$work/valid.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
runs = j["results"][0]["runs"] if j.get("results") else {}
if j.get("complete") is not True or sorted(runs) != ["eager", "lorabench"] or any(len(r) != 1 for r in runs.values()):
    sys.exit(f"FAIL: --json: complete={j.get('complete')!r}, runs {({k: len(v) for k, v in runs.items()})}")
PY
    # --evidence: one file, <family>/<UTC date>-<commit>-quick-set.json, whose run file hashes as it says, and
    # from which the generator writes a page with no number the evidence lacks (tests/docs/ checks the same).
    "$py" - "$work/evidence" "$src" "$dt" <<'PY'
import glob, hashlib, importlib.util, json, os, re, sys
ev_dir, src, dt = sys.argv[1], sys.argv[2], sys.argv[3]
files = glob.glob(os.path.join(ev_dir, "*", "*.json"))
if len(files) != 1 or not re.fullmatch(r"\d{4}-\d\d-\d\d-([0-9a-f]{7}|nogit)-quick(-fp32)?-set\.json", os.path.basename(files[0])):
    sys.exit(f"FAIL: --evidence wrote {files}")
ev = json.load(open(files[0]))
if ev["schema"] != "lorabench-evidence/1" or ev["machine"]["family"] != os.path.basename(os.path.dirname(files[0])):
    sys.exit(f"FAIL: evidence schema {ev['schema']!r}, family {ev['machine']['family']!r}")
# Committed evidence names this machine's paths as <checkout> and ~ (its machine is described apart).
if src in json.dumps(ev) or os.path.expanduser("~") + "/" in json.dumps(ev):
    sys.exit(f"FAIL: the evidence names this checkout or home directory by its path")
for run in ev["workloads"][0]["runs"]["lorabench"]:
    rf = run["extra"]["run_file"]
    with open(os.path.expanduser(rf["path"].replace("<checkout>", src)), "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != rf["sha256"] or rf["summary"]["step_time_median_s"] != run["step_s"]:
            sys.exit(f"FAIL: the evidence's record of {rf['path']} is not the file's")
if not (ev["host_noise"]["before"]["windows"] > 0 and ev["table"]["rows"][1]["speedup"] > 0):
    sys.exit("FAIL: no host noise or no speedup in the evidence")
spec = importlib.util.spec_from_file_location("check", os.path.join(src, "tests", "docs", "results_evidence_check.py"))
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)
gen = check.load_generator(src)
evidence = gen.load(ev_dir, allow_quick=True)
page = gen.render(evidence, ev_dir)
problems = check.check_numbers("the page", page, check.evidence_numbers(evidence, gen.FORMATS.values()))
if problems or f"| tiny-{dt} | hf-eager | 1 |" not in page:
    sys.exit(f"FAIL: {problems or 'no hf-eager row'}\n{page}")
print(f"evidence {files[0]}: run file hashed, page of {len(page.splitlines())} lines")
PY
    grep -qE "tiny-$dt round 0 hf-eager: [0-9.]+ s/step, [0-9.]+ tokens/s, [0-9]+ MiB, step-0 loss" "$err" ||
      { cat "$err"; echo "FAIL: no progress line with tokens/s and memory"; exit 1; }
    for row in "| tiny-$dt | lorabench single | 1 |" "| tiny-$dt | hf-eager | 1 |"; do
      grep -qF -- "$row" "$out" || { cat "$out"; echo "FAIL: no row '$row'"; exit 1; }
    done
    # The roofline columns: lorabench's bound of the step (compute or memory) for every side, and how much of
    # it each achieves; the bandwidth lorabench measured named under the table.
    for side in "lorabench single" hf-eager; do
      grep -qE "^\| tiny-$dt \| $side \| 1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \| [0-9.]+ \((compute|memory)\) \| [0-9.]+% \|" "$out" ||
        { cat "$out"; echo "FAIL: no roofline columns in the $side row"; exit 1; }
    done
    grep -qE "^- roofline bound = .*GB/s: tiny-$dt [0-9.]+\)" "$out" || { cat "$out"; echo "FAIL: no roofline line"; exit 1; }
    grep -q "INVALID" "$out" "$err" && { cat "$out" "$err"; echo "FAIL: INVALID in a passing run"; exit 1; }
    # the machine's quiet, measured before and after (a figure, a CV and a verdict each time)
    grep -qE "^host noise .* before: [0-9]+ GFLOP/s( \([^)]*\))?, median of [0-9]+ windows .*CV [0-9.]+%\): (quiet|NOT quiet).*; after: [0-9]+ GFLOP/s.*CV [0-9.]+%\): (quiet|NOT quiet)" "$out" ||
      { cat "$out"; echo "FAIL: no host noise line before and after"; exit 1; }
    # The peer trains in train mode (from_pretrained returns eval mode: Liger's fused linear + cross-entropy
    # and LoRA dropout act only in train mode), in the dtype asked for.
    "$py" - "$src/bench" "$work/models" <<'PY'
import glob, os, sys
import torch
sys.path.insert(0, sys.argv[1])
import peer_hf
snap = os.path.dirname(sorted(glob.glob(os.path.join(sys.argv[2], "*", "config.json")))[0])
for flags, dtype in (([], torch.bfloat16), (["--dtype", "fp32"], torch.float32)):
    sys.argv = ["peer_hf", "--model", snap] + flags
    model = peer_hf.build_model(peer_hf.parse_args(), torch.device("cpu"))
    if not model.training or not all(m.training for m in model.modules()):
        sys.exit("FAIL: the peer's model is not in train mode")
    if {p.dtype for p in model.parameters() if not p.requires_grad} != {dtype}:
        sys.exit(f"FAIL: the peer's frozen weights are not {dtype} with {flags}")
    print(f"peer model {flags}: train mode, {dtype}")
PY
    "$py" "$src/bench/host_noise.py" --seconds 0 >"$out.noise0" 2>&1 && { echo "FAIL: host_noise.py ran 0 s"; exit 1; }
    grep -q "must be > 0" "$out.noise0" || { cat "$out.noise0"; echo "FAIL: host_noise.py's error"; exit 1; }
    ;;
  deepspeed)
    "${cmd[@]}" --deepspeed --json "$work/deepspeed.json" >"$out" 2>"$err" ||
      { cat "$out" "$err"; echo "FAIL: the quick DeepSpeed table failed"; exit 1; }
    grep -q "(checked: VALID)" "$out" || { cat "$out"; echo "FAIL: no VALID step-0 check"; exit 1; }
    for row in "zero2|lorabench zero2" "zero2|deepspeed-zero2" "zero3|lorabench fsdp" "zero3|deepspeed-zero3" \
               "zero3|deepspeed-zero3-offload" "zero3|deepspeed-zero3-offload-param"; do
      w="tiny-$dt-${row%%|*}" side="${row#*|}"
      grep -qE "^\| $w \| $side \| 2 \| [0-9.]+ \| [0-9.]+ \|" "$out" || { cat "$out"; echo "FAIL: no $w row of $side"; exit 1; }
      by="lorabench plan \(RSS / rank\)"
      [[ $side == deepspeed-* ]] && by="DeepSpeed estimate_zero${row:4:1}_model_states_mem_needs \(model states / rank\)"
      grep -qE "^\| $w \| $side \| [0-9.]+ \| (lorabench's counters|DeepSpeed's comms logger) \| [0-9]+ \| $by \| [0-9.]+ \|$" "$out" ||
        { cat "$out"; echo "FAIL: no bytes and prediction row of $side in $w"; exit 1; }
    done
    grep -c "^- target, tiny-$dt-zero[23] against deepspeed-" "$out" | grep -qx 4 || { cat "$out"; echo "FAIL: not 4 target lines"; exit 1; }
    "$py" - "$work/deepspeed.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
runs = {(r["workload"]["name"].rsplit("-", 1)[1], side): rs[0] for r in j["results"] for side, rs in r["runs"].items()}
b = {k: v["extra"]["comm_bytes_per_step"] for k, v in runs.items()}
ours, ds = b[("zero2", "lorabench")], b[("zero2", "ds-zero2")]
# The same gradient elements: lorabench reduces its fp32 adapters' gradients in fp32; DeepSpeed's bf16 mode casts
# the whole model, adapters included, to bf16 and reduces bf16 gradients (2 bytes each; fp32 in an fp32 table).
ds_element = 2 if runs[("zero2", "ds-zero2")]["extra"]["dtype"] in ("bf16", "torch.bfloat16") else 4
if not (ours > 0 and abs(ours / 4 - ds / ds_element) <= 0.01 * ds / ds_element):
    sys.exit(f"FAIL: ZeRO-2 bytes per step: lorabench {ours} (fp32), DeepSpeed {ds} ({ds_element}-byte elements): "
             "not the same gradient volume")
for side in ("ds-zero3", "ds-zero3-offload", "ds-zero3-offload-param"):
    if not b[("zero3", "lorabench")] < 0.5 * b[("zero3", side)]:
        sys.exit(f"FAIL: lorabench fsdp {b[('zero3', 'lorabench')]} bytes/step against {side}'s {b[('zero3', side)]}")
want = {"ds-zero2": (2, None, None), "ds-zero3": (3, None, None), "ds-zero3-offload": (3, "cpu", None),
        "ds-zero3-offload-param": (3, "cpu", "cpu")}
for (pair, side), run in runs.items():
    if side == "lorabench":
        continue
    z = run["extra"]["ds_config"]["zero_optimization"]
    got = (z["stage"], z.get("offload_optimizer", {}).get("device"), z.get("offload_param", {}).get("device"))
    e = run["extra"]["ds_estimate"]
    if got != want[side] or not e["per_rank_bytes"] > 0 or e["total_params"] < run["extra"].get("trainable", 0):
        sys.exit(f"FAIL: {side}: ds_config zero {got}, estimate {e}")
print("ZeRO-2 bytes per step: lorabench", ours, "DeepSpeed", ds, "; ds_configs as asked")
PY
    grep -c '^- ds_config of deepspeed-zero[23]' "$out" | grep -qx 4 || { cat "$out"; echo "FAIL: not 4 ds_config lines"; exit 1; }
    grep -q "INVALID" "$out" "$err" && { cat "$out" "$err"; echo "FAIL: INVALID in a passing run"; exit 1; }
    ;;
  mismatch)
    if "${cmd[@]}" --fault-peer-seed-offset 1 >"$out" 2>"$err"; then
      cat "$out" "$err"; echo "FAIL: the equal-work check passed on different tokens"; exit 1
    fi
    grep -q "INVALID: tiny-$dt: hf-eager step-0 loss" "$err" ||
      { cat "$out" "$err"; echo "FAIL: not the equal-work check"; exit 1; }
    # --lorabench-set: a key that defines the workload, or no KEY=VALUE, is refused before anything runs; a
    # value lorabench refuses stops the benchmark with lorabench's message (the key reaches its command line).
    for bad in "model.dtype=fp32|the benchmark sets model.dtype itself" "model.cuda_attention|expected KEY=VALUE"; do
      rc=0; "${cmd[@]}" --lorabench-set "${bad%%|*}" >"$out.set" 2>&1 || rc=$?
      [[ $rc != 0 ]] && grep -qF -- "${bad#*|}" "$out.set" && ! grep -q "round 0" "$out.set" ||
        { cat "$out.set"; echo "FAIL: --lorabench-set ${bad%%|*}: exit $rc, expected a refusal '${bad#*|}'"; exit 1; }
    done
    rc=0; "${cmd[@]}" --lorabench-set model.cuda_attention=flash3 >"$out.set" 2>&1 || rc=$?
    [[ $rc != 0 ]] && grep -q "model.cuda_attention" "$out.set" && grep -q -- "--set model.cuda_attention=flash3" "$out.set" ||
      { cat "$out.set"; echo "FAIL: --lorabench-set model.cuda_attention=flash3 did not reach lorabench (exit $rc)"; exit 1; }
    ;;
  sweep)
    "$lorabench" "$src/inputs/tiny.ini" --set data.seq_len=32768 --set train.micro_batch=2048 \
      --set run.output_dir="$work/sweep-refused" >"$out.refused" 2>&1 && { echo "FAIL: the huge run was not refused"; exit 1; }
    "$lorabench" "$src/inputs/tiny.ini" --set train.no_such_key=1 >"$out.bad" 2>&1 && { echo "FAIL: a bad key ran"; exit 1; }
    "$py" -c "import torch; torch.empty(2**60, dtype=torch.uint8)" >"$out.aten" 2>&1 && { echo "FAIL: 2^60 bytes allocated"; exit 1; }
    "$py" - "$src/bench" "$out" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from run_bench import no_fit_reason
out = sys.argv[2]
for name, rc, want in (("refused", 2, "this run cannot fit"), ("aten", 1, "can't allocate memory"), ("bad", 2, None)):
    got = no_fit_reason(rc, open(f"{out}.{name}").read())
    if (want is None) != (got is None) or (want and want not in got):
        sys.exit(f"FAIL: no_fit_reason on {name}: {got!r}, expected {'not a fit failure' if want is None else want!r}")
    print(f"{name}: {got!r}")
if no_fit_reason(0, "out of memory") is not None or no_fit_reason(-9, "") is None:
    sys.exit("FAIL: no_fit_reason on exit codes 0 / -9")
PY
    # Where libtorch's bf16 CPU GEMMs are its reference loops (no AVX-512), the full CPU table is refused
    # with the reason; with AVX-512, --quick, --allow-reference-bf16 or on a GPU it is not.
    printf 'processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n' >"$work/cpuinfo-avx2"
    printf 'processor\t: 0\nflags\t\t: fpu avx2 fma avx512f avx512dq avx512bw avx512vl\n' >"$work/cpuinfo-avx512"
    "$py" - "$src/bench" "$work" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from benchlib import cpu_bf16_gemm_native
from run_bench import reference_bf16_refusal
avx2, avx512 = f"{sys.argv[2]}/cpuinfo-avx2", f"{sys.argv[2]}/cpuinfo-avx512"
if cpu_bf16_gemm_native(avx2) or not cpu_bf16_gemm_native(avx512):
    sys.exit("FAIL: cpu_bf16_gemm_native on the AVX2 / AVX-512 flags")
msg = reference_bf16_refusal("cpu", False, False, avx2)
if not msg or "no AVX-512" not in msg or "--allow-reference-bf16" not in msg or "--dtype fp32" not in msg:
    sys.exit(f"FAIL: no refusal on AVX2: {msg!r}")
for args in (("cpu", False, False, avx512), ("cpu", True, False, avx2), ("cpu", False, True, avx2),
             ("cuda", False, False, avx2), ("cpu", False, False, avx2, "fp32")):
    if reference_bf16_refusal(*args) is not None:
        sys.exit(f"FAIL: refused {args}")
# A side that ran in another dtype than the table's is not equal work, whatever its loss.
from run_bench import Run, check_equal_work, workloads
w = workloads("cpu", True, "fp32")[0]
check_equal_work(w, 2.0, Run("hf-eager", 1.0, 1.0, 1.0, 2.0, extra={"dtype": "fp32"}), "fp32")
try:
    check_equal_work(w, 2.0, Run("hf-eager", 1.0, 1.0, 1.0, 2.0, extra={"dtype": "bf16"}), "fp32")
    sys.exit("FAIL: a bf16 run passed the fp32 table's check")
except SystemExit as e:
    if "ran in bf16, not fp32" not in str(e):
        raise
PY
    if "$py" "$src/bench/run_bench.py" --lorabench "$lorabench" --device cpu --cpuinfo "$work/cpuinfo-avx2" \
        >"$out.refused-cpu" 2>&1; then
      echo "FAIL: the full CPU table started on an AVX2-only CPU"; exit 1
    fi
    grep -q "bench: REFUSED: this CPU has no AVX-512" "$out.refused-cpu" || { cat "$out.refused-cpu"; echo "FAIL: not the refusal"; exit 1; }
    # In fp32 (on an AVX2-only CPU also several times faster than the peer's bf16 reference loops).
    "${quick[@]}" --dtype fp32 --sweep-batch --sweep-max 2 --json "$work/sweep.json" >"$out" 2>"$err" ||
      { cat "$out" "$err"; echo "FAIL: the sweep failed"; exit 1; }
    grep -qF "tiny-fp32, the largest micro-batch each side fits (doubling, 1 warm-up + 1 step per try): lorabench 2 (4 and above not tried (--sweep-max 2)); hf-eager 2 (4 and above not tried (--sweep-max 2))" "$out" ||
      { cat "$out"; echo "FAIL: no sweep line"; exit 1; }
    for row in "| tiny-fp32 | lorabench single | 1 |" "| tiny-fp32-b2 | lorabench single | 1 |" "| tiny-fp32-b2 | hf-eager | 1 |"; do
      grep -qF -- "$row" "$out" || { cat "$out"; echo "FAIL: no row '$row'"; exit 1; }
    done
    grep -qF "; fp32, LoRA r16 alpha 32 " "$out" && grep -qF "step-0 losses equal within 0.0001 relative" "$out" &&
      grep -qF ": fp32 GEMMs of the step's shapes" "$out" ||
      { cat "$out"; echo "FAIL: the fp32 table does not say fp32 (description, loss tolerance, frame)"; exit 1; }
    grep -q "^bf16 GEMMs:" "$out" && { cat "$out"; echo "FAIL: the fp32 table has the bf16 GEMM line"; exit 1; }
    # Every run of it in fp32, as lorabench's run files and the peer's report say (run_bench checks it too).
    "$py" - "$work/sweep.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
dtypes = {(w["workload"]["name"], side, r["extra"].get("dtype")) for w in j["results"] for side, rs in w["runs"].items()
          for r in rs}
if len(dtypes) != 4 or {d for _, _, d in dtypes} != {"fp32"}:
    sys.exit(f"FAIL: the runs' dtypes: {sorted(dtypes)}")
print(sorted(dtypes))
PY
    ;;
  profiles)
    # check_groups FILE [ROW[@MIN]...]: the group table (after "| group |") has positive GEMMs and attention
    # rows (libtorch's fused kernels, or lorabench's blocked kernel on CPUs with AVX-512 BF16) and each ROW
    # given (at least MIN percent of the step where given), and its shares sum to the whole
    # step (within rounding of the printed shares).
    check_groups() {
      "$py" - "$@" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
rows = re.search(r"\| group \|.*?\n\| --- .*?\n((?:\|.*\n?)+)", text)
if not rows:
    sys.exit(f"FAIL: no group table in {sys.argv[1]}")
shares, seconds = {}, {}
for line in rows.group(1).strip().splitlines():
    cells = [c.strip() for c in line.strip("|").split("|")]
    shares[cells[0]] = float(cells[2].rstrip("%"))
    seconds[cells[0]] = float(cells[1])
# Attention by its seconds: next to bf16 GEMMs run by libtorch's reference loops (CPUs without AVX-512) its
# share of a tiny step prints as 0.0%.
attention = [k for k in shares if k.startswith("attention (")]
if len(attention) != 1 or seconds[attention[0]] <= 0:
    sys.exit(f"FAIL: not one positive attention row in {sys.argv[1]}: {seconds}")
for need in ["GEMMs"] + sys.argv[2:]:
    need, _, floor = need.partition("@")
    if shares.get(need, 0) <= float(floor or 0):
        sys.exit(f"FAIL: no '{need}' row above {floor or 0}% in {sys.argv[1]}: {shares}")
if abs(sum(shares.values()) - 100) > 1.0:
    sys.exit(f"FAIL: the groups add up to {sum(shares.values()):.1f}% of the step in {sys.argv[1]}: {shares}")
print(f"{sys.argv[1]}: {shares}")
PY
    }
    # A mistyped flag or value is refused before anything is measured (exit 2, naming it), not ignored.
    for bad in "--stpes 1|unknown argument \"--stpes\"" "--dtype fp16|--dtype takes one of bf16, fp32" \
               "--steps 0|--steps takes a positive integer" "--preset tiny --top|--top needs a value"; do
      rc=0; timeout 60 "$lorabench" ${bad%%|*} >"$out.bad" 2>&1 || rc=$?
      [ "$rc" = 2 ] && grep -qF -- "${bad#*|}" "$out.bad" && ! grep -q "s per step" "$out.bad" ||
        { cat "$out.bad"; echo "FAIL: lorabench-profile-ops ${bad%%|*}: exit $rc, expected 2 and '${bad#*|}'"; exit 1; }
    done
    "$lorabench" --help | grep -q "^usage: lorabench-profile-ops" || { echo "FAIL: --help prints no usage"; exit 1; }
    OMP_NUM_THREADS=1 "$lorabench" --preset tiny --steps 1 --warmup 1 >"$out.ours" 2>"$err" ||
      { cat "$out.ours" "$err"; echo "FAIL: lorabench-profile-ops failed"; exit 1; }
    check_groups "$out.ours"
    # The peer as profile_peer.py runs it by default (bf16) where bf16 GEMMs run in oneDNN, then the fp32 table's
    # peer (scripts/bench.sh --dtype fp32) in the same groups; elsewhere the fp32 one only (see $dt above).
    if [[ $dt == bf16 ]]; then
      OMP_NUM_THREADS=1 "$py" "$src/bench/profile_peer.py" --preset tiny --steps 1 --warmup 1 >"$out.peer" 2>"$err" ||
        { cat "$out.peer" "$err"; echo "FAIL: profile_peer.py failed"; exit 1; }
      grep -q "^hf-eager tiny bf16, seq 256:" "$out.peer" || { cat "$out.peer"; echo "FAIL: not the bf16 peer"; exit 1; }
      check_groups "$out.peer"
    fi
    OMP_NUM_THREADS=1 "$py" "$src/bench/profile_peer.py" --preset tiny --precision fp32 --steps 1 --warmup 1 \
      >"$out.peer32" 2>"$err" || { cat "$out.peer32" "$err"; echo "FAIL: profile_peer.py --precision fp32 failed"; exit 1; }
    grep -q "^hf-eager tiny fp32, seq 256:" "$out.peer32" || { cat "$out.peer32"; echo "FAIL: not the fp32 peer"; exit 1; }
    check_groups "$out.peer32"
    # The FSDP2 peer (2 ranks over gloo, as scripts/bench.sh runs it), rank 0's main thread: the time it
    # waits for gloo's all-gathers is a group of its own (12.7% of the tiny preset's step when written, 1% when
    # those waits were left in the other groups). Without a launcher it is refused, not run alone.
    rc=0; "$py" "$src/bench/profile_peer.py" --preset tiny --dist fsdp2 >"$out.bad" 2>&1 || rc=$?
    [ "$rc" = 2 ] && grep -q -- "--dist fsdp2 needs 2 or more ranks" "$out.bad" ||
      { cat "$out.bad"; echo "FAIL: profile_peer.py --dist fsdp2 on one process: exit $rc, expected 2"; exit 1; }
    OMP_NUM_THREADS=1 "$py" -m torch.distributed.run --standalone --nproc-per-node 2 "$src/bench/profile_peer.py" --preset tiny \
      --precision fp32 --dist fsdp2 --steps 1 --warmup 1 >"$out.fsdp2" 2>"$err" ||
      { cat "$out.fsdp2" "$err"; echo "FAIL: profile_peer.py --dist fsdp2 failed"; exit 1; }
    grep -q "^hf-eager-fsdp2 (rank 0 of 2) tiny fp32, seq 256:" "$out.fsdp2" ||
      { cat "$out.fsdp2"; echo "FAIL: not the FSDP2 peer's rank 0"; exit 1; }
    # The waits for gloo are a group of their own: 12.7-14.1% of the tiny step when this check was written,
    # 3.4% in one run of 2026-12-05 where the softmax and loss group took 47%, and 0.7% when the waits were
    # left in other groups (the fault this guards against).
    check_groups "$out.fsdp2" "collectives (waiting for gloo's transfers)@2"
    # scripts/gpu_check.sh profile (both profilers on the GPU workload, on the lent machine) here on the CPU:
    # the tiny shape, the eager peer, both sides in $dt; its files have the group tables.
    mkdir -p "$work/gpuprof/build/bench" "$work/gpuprof/carry/debs"
    ln -sf "$lorabench" "$work/gpuprof/build/bench/lorabench-profile-ops"
    PATH="$(dirname "$py"):$PATH" LB_GPU_CHECK_BUILD="$work/gpuprof/build" LB_GPU_CHECK_PROFILE_DEVICE=cpu \
      LB_GPU_CHECK_PROFILE_PRESET=tiny LB_GPU_CHECK_PROFILE_SHAPE="--seq 128 --batch 2" LB_GPU_CHECK_PROFILE_MODES=eager \
      LB_GPU_CHECK_PROFILE_DTYPE=$dt \
      OMP_NUM_THREADS=1 "$src/scripts/gpu_check.sh" profile "$work/gpuprof/out" "$work/gpuprof/carry" >"$out.gpuprof" 2>&1 ||
      { cat "$out.gpuprof" "$work"/gpuprof/out/*; echo "FAIL: gpu_check.sh profile failed"; exit 1; }
    # Each .md starts with its profiler's header line (its messages are in the .log beside it).
    for f in lorabench hf-eager; do [[ -f "$work/gpuprof/out/profile-$f.log" ]] || { echo "FAIL: no profile-$f.log"; exit 1; }; done
    head -n 1 "$work/gpuprof/out/profile-lorabench.md" | grep -q "^tiny $dt, seq 128, micro-batch 2, cpu:" ||
      { cat "$work/gpuprof/out/profile-lorabench.md"; echo "FAIL: not lorabench's profile of seq 128 x 2"; exit 1; }
    head -n 1 "$work/gpuprof/out/profile-hf-eager.md" | grep -q "^hf-eager tiny $dt, seq 128, micro-batch 2:" ||
      { cat "$work/gpuprof/out/profile-hf-eager.md"; echo "FAIL: not the peer's profile of seq 128 x 2"; exit 1; }
    check_groups "$work/gpuprof/out/profile-lorabench.md"
    check_groups "$work/gpuprof/out/profile-hf-eager.md"
    # --device cuda without a GPU is refused by both, not profiled on the CPU.
    if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
      rc=0; "$lorabench" --device cuda --preset tiny >"$out.nocuda" 2>&1 || rc=$?
      [[ $rc == 2 ]] && grep -q -- "--device cuda: this" "$out.nocuda" ||
        { cat "$out.nocuda"; echo "FAIL: lorabench-profile-ops --device cuda without a GPU: exit $rc"; exit 1; }
      rc=0; "$py" "$src/bench/profile_peer.py" --device cuda --preset tiny >"$out.nocuda" 2>&1 || rc=$?
      [[ $rc == 2 ]] && grep -q -- "--device cuda: torch sees no CUDA device" "$out.nocuda" ||
        { cat "$out.nocuda"; echo "FAIL: profile_peer.py --device cuda without a GPU: exit $rc"; exit 1; }
    fi
    # Under torch.compile the generated kernels are a group of their own, not time outside ops.
    OMP_NUM_THREADS=1 "$py" "$src/bench/profile_peer.py" --preset tiny --mode compile --precision "$dt" --steps 1 --warmup 2 \
      >"$out.compiled" 2>"$err" || { cat "$out.compiled" "$err"; echo "FAIL: profile_peer.py --mode compile failed"; exit 1; }
    check_groups "$out.compiled" "torch.compile's generated kernels"
    # bench/attention_cpu.py (docs/performance.md, "What was tried"): the flash kernel checked against the
    # fp64 formula, then a row per case with a positive time; a bad argument is refused.
    OMP_NUM_THREADS=1 "$py" "$src/bench/attention_cpu.py" --seq 64 --rounds 1 --min-sample-s 0.001 >"$out.attn" 2>"$err" ||
      { cat "$out.attn" "$err"; echo "FAIL: attention_cpu.py failed"; exit 1; }
    grep -qE "^flash kernel against the fp64 formula .*forward bf16 [0-9.e+-]+, forward fp32 .*backward bf16 [0-9.e+-]+$" "$out.attn" ||
      { cat "$out.attn"; echo "FAIL: attention_cpu.py printed no error check"; exit 1; }
    [[ $(grep -cE "^\| (flash|forward's|backward's) .* \| [0-9]+\.[0-9]+ \| [0-9]+\.[0-9] \|$" "$out.attn") == 8 ]] ||
      { cat "$out.attn"; echo "FAIL: attention_cpu.py's table lacks its 8 rows"; exit 1; }
    rc=0; "$py" "$src/bench/attention_cpu.py" --seq 0 >"$out.bad" 2>&1 || rc=$?
    [[ $rc == 2 ]] && grep -q -- "--seq and --rounds must be >= 1" "$out.bad" ||
      { cat "$out.bad"; echo "FAIL: attention_cpu.py --seq 0: exit $rc, expected 2"; exit 1; }
    # bench/prepacked_gemm.py (oneDNN's weight copies, docs/performance.md): where libtorch runs bf16 GEMMs with
    # oneDNN, both ways agree and the table has its 10 rows and its sum; elsewhere it says why it measures
    # nothing. A bad argument is refused.
    OMP_NUM_THREADS=1 "$py" "$src/bench/prepacked_gemm.py" --layers 1 --head-chunks 1 --tokens 16 --rounds 1 \
      --min-sample-s 0.001 >"$out.packed" 2>"$err" || { cat "$out.packed" "$err"; echo "FAIL: prepacked_gemm.py failed"; exit 1; }
    if "$py" -c "import sys; sys.path.insert(0, '$src/bench'); import benchlib; sys.exit(0 if benchlib.cpu_bf16_gemm_native() else 1)"; then
      [[ $(grep -cE "^\| [a-z\\|]+( chunk)? \| (forward|input gradient) .* \| [0-9.]+x \| [0-9.e+-]+ \| [0-9]+ \|$" "$out.packed") == 10 ]] &&
        grep -qE "^All rows: at::mm [0-9.]+ ms, prepacked [0-9.]+ ms \([0-9.]+x\)" "$out.packed" ||
        { cat "$out.packed"; echo "FAIL: prepacked_gemm.py's table lacks its 10 rows or its sum"; exit 1; }
    else
      grep -q "^CPU without AVX-512: libtorch runs no bf16 GEMM with oneDNN here" "$out.packed" ||
        { cat "$out.packed"; echo "FAIL: prepacked_gemm.py did not say why it measures nothing here"; exit 1; }
    fi
    rc=0; "$py" "$src/bench/prepacked_gemm.py" --tokens 0 >"$out.bad" 2>&1 || rc=$?
    [[ $rc == 2 ]] && grep -q -- "--tokens and --rounds must be >= 1" "$out.bad" ||
      { cat "$out.bad"; echo "FAIL: prepacked_gemm.py --tokens 0: exit $rc, expected 2"; exit 1; }
    ;;
  crossover)
    # bench/hybrid_crossover.py on Qwen3.5-tiny's widths, one layer of each kind, two lengths: both models train,
    # each run file names its layer kind, the table and the crossover line are printed, and the evidence file
    # renders through scripts/results-doc.py with every number of its section in the file.
    rm -rf "$work/crossover-evidence"
    "$py" "$src/bench/hybrid_crossover.py" --lorabench "$lorabench" --preset qwen3.5-tiny --seqs 64,32 --layers 1 \
      --vocab 256 --steps 1 --warmup 0 --evidence "$work/crossover-evidence" >"$out" 2>"$err" ||
      { cat "$out" "$err"; echo "FAIL: bench/hybrid_crossover.py failed"; exit 1; }
    grep -qE '^\| 32 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|' "$out" && grep -qE '^\| 64 \|' "$out" ||
      { cat "$out"; echo "FAIL: no rows for T = 32 and 64 (in that order)"; exit 1; }
    grep -q -- "- crossover: " "$out" || { cat "$out"; echo "FAIL: no crossover line"; exit 1; }
    "$py" - "$work/crossover-evidence" "$src" <<'PY' || exit 1
import glob, importlib.util, json, os, sys
files = glob.glob(os.path.join(sys.argv[1], "*", "*-crossover.json"))
if len(files) != 1:
    sys.exit(f"FAIL: expected one crossover evidence file, found {files}")
ev = json.load(open(files[0]))
kinds = {r["kind"]: r["run_file"]["summary"]["model_layers"] for r in ev["runs"]}
# ModelShape::layer_mix: a model with no linear layer is "N layers"
if kinds != {"linear_attention": "1 linear-attention + 0 full-attention layers", "full_attention": "1 layers"}:
    sys.exit(f"FAIL: the run files' layer kinds are {kinds}")
if [r["seq"] for r in ev["table"]["rows"]] != [32, 64] or ev["kind"] != "crossover":
    sys.exit("FAIL: the evidence table is not T = 32, 64")
spec = importlib.util.spec_from_file_location("results_doc", os.path.join(sys.argv[2], "scripts", "results-doc.py"))
doc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(doc)
page = doc.render(doc.load(sys.argv[1]), sys.argv[1])
for r in ev["table"]["rows"]:
    for key, kind in (("linear_step", "seconds"), ("full_step", "seconds"), ("full_tensor_peak", "bytes_mib")):
        if doc.fmt(kind, r[key]) not in page:
            sys.exit(f"FAIL: {key} of T = {r['seq']} ({doc.fmt(kind, r[key])}) is not on the rendered page")
print("ok: crossover evidence renders;", kinds)
PY
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS: $case_name"
