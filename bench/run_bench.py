#!/usr/bin/env python3
"""lorabench against the stack its users run instead (bench/peer_hf.py: transformers + peft, eager, under
torch.compile, DDP, FSDP2, and on GPU with Liger Kernel), on one machine, in one run:

- equal work: every side loads the same snapshot (bench/equal_work.py), trains on lorabench's synthetic
  tokens with the same sequence length, micro-batch, threads per rank and dtype (--dtype: bf16, or fp32),
  and must report the same step-0 loss within equal_work.loss_rtol(dtype); a side that does not is INVALID
  and the run fails;
- sides alternate within each round (the order rotates), every figure is the median over rounds of each
  run's median step;
- one frame for LoRA-MFU (bench/frame.py), measured before the first run, between rounds and after the
  last; each GEMM shape's best over those is used for every side, and all of them are printed with their
  spread;
- a Markdown table: step time, tokens/s, LoRA-MFU, peak memory (RSS on CPU, CUDA peak allocated on GPU),
  step-0 loss, lorabench's speedup and memory ratio against each side; the machine's facts;
- with --sweep-batch, first each side's largest micro-batch (doubling until a try does not fit: out of
  memory, or lorabench's refusal before it allocates), then the table also at the largest every side fits.

    scripts/bench.sh [--rounds N] [--steps N] [--only WORKLOAD ...] [--out FILE.md]
    scripts/bench.sh --quick        # tiny shape, 1 round, lorabench and the eager peer (tests/e2e)
    scripts/bench.sh --device cuda --sweep-batch    # the GPU table also at the largest micro-batch that fits
    scripts/bench.sh --dtype fp32   # every side in fp32 (the workloads are then named 0.5b-fp32, ...)
    scripts/bench.sh --model qwen3-0.6b   # the same table on Qwen3-0.6B (workloads qwen3-0.6b-bf16, ...)
    scripts/bench.sh --device cpu --rounds 3 --evidence results   # also results/<family>/<date>-<commit>.json
    scripts/bench.sh --deepspeed --dtype fp32       # lorabench's ZeRO-2 and FSDP against DeepSpeed's ZeRO-2/3

--deepspeed runs the DeepSpeed table instead (seed 002's question): on 2 ranks, lorabench zero2 against
DeepSpeed ZeRO-2, and lorabench fsdp against DeepSpeed ZeRO-3, ZeRO-3 with the optimizer offloaded to the
CPU, and with the parameters offloaded too (bench/peer_hf.py --dist ds-*: transformers + peft in DeepSpeed's
engine). Beside the usual columns it shows the bytes each side communicated per step (lorabench's counters,
DeepSpeed's comms logger) and the memory each predicted before the run (lorabench's planner, `lorabench plan`;
DeepSpeed's estimate_zero2/zero3_model_states_mem_needs) against the peak RSS measured, the targets of the
comparison, and every ds_config used. --model qwen2.5-7b makes it the 7B table (the article's size).

--evidence DIR writes the run as an evidence file (bench/evidence.py): the command, commit, machine, host
noise, every run (lorabench's run files with their sha256 and summary) and the table's figures, from which
scripts/results-doc.py writes docs/results.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace

import evidence
from benchlib import QUIET_CV, cpu_bf16_gemm_native, host_noise, measure_isolated, mpirun, summary
from equal_work import QWEN3_5_LINEAR, hf_config, lorabench_targets, loss_matches, loss_rtol, write_snapshot
from frame import lora_flops_per_token

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEED = 1234  # lorabench's default run.seed: the synthetic tokens of both sides
LORA_R, LORA_ALPHA = 16, 32  # given to both sides explicitly (inputs/bench.ini has the same)


@dataclass
class Workload:
    name: str
    preset: str
    ranks: int
    strategy: str        # lorabench's parallel.strategy
    peers: list          # peer_hf modes: eager, compile, liger (with --dist when ranks > 1)
    seq: int = 256
    batch: int = 1       # micro-batch per rank
    dist: str = "none"   # peer_hf --dist (a DeepSpeed side, ds-*, is its own --dist)
    note: str = ""
    prediction: dict = field(default_factory=dict)  # --deepspeed: lorabench plan's row for this workload


# --model: the preset of the table's workloads, the prefix of their names, and the --quick shape of its family.
MODELS = {"qwen2.5-0.5b": ("0.5b", "tiny"), "qwen3-0.6b": ("qwen3-0.6b", "qwen3-tiny"),
          "qwen3.5-0.8b": ("qwen3.5-0.8b", "qwen3.5-tiny"), "qwen2.5-7b": ("7b", "tiny")}
# --deepspeed: lorabench's strategy and the DeepSpeed sides it is compared with (bench/peer_hf.py --dist), by
# the name of the pair: ZeRO-2 against ZeRO-2; FSDP (ZeRO-3's sharding) against ZeRO-3, without and with offload.
DEEPSPEED_PAIRS = (("zero2", "zero2", ["ds-zero2"]),
                   ("zero3", "fsdp", ["ds-zero3", "ds-zero3-offload", "ds-zero3-offload-param"]))
# The comparison's targets (issue 48): lorabench's tokens/s at least this multiple of the DeepSpeed side's, at
# no more peak RSS per rank.
DEEPSPEED_SPEEDUP_TARGET = 1.5


def workload_prefix(model):
    return MODELS[model][0]


def workloads(device, quick, dtype, model="qwen2.5-0.5b", deepspeed=False):
    """The table's workloads; their names carry the model and the dtype (0.5b-bf16, 0.5b-fp32-ddp2,
    qwen3-0.6b-bf16, ...); with deepspeed the DeepSpeed table's (0.5b-bf16-zero2, 0.5b-bf16-zero3, ...)."""
    prefix, quick_preset = MODELS[model]
    if deepspeed:
        preset, name = (quick_preset, quick_preset) if quick else (model, prefix)
        return [Workload(f"{name}-{dtype}-{pair}", preset, 2, strategy, list(sides))
                for pair, strategy, sides in DEEPSPEED_PAIRS]
    if model == "qwen2.5-7b":
        raise SystemExit("bench: --model qwen2.5-7b is the DeepSpeed table's (--deepspeed); the peers' table runs "
                         "Qwen2.5-0.5B or Qwen3-0.6B")
    if quick:
        return [Workload(f"{quick_preset}-{dtype}", quick_preset, 1, "single", ["eager"])]
    if device == "cuda":  # Liger Kernel has kernels for Qwen2 and Qwen3, none for Qwen3.5's linear layers
        peers = ["eager", "compile"] + ([] if model in QWEN3_5_LINEAR else ["liger"])
        return [Workload(f"{prefix}-{dtype}-gpu", model, 1, "single", peers, seq=2048, batch=8)]
    fsdp_note = ("the peer keeps fp32 parameters (FSDP2 shards one dtype per group) and computes in bf16"
                 if dtype == "bf16" else "")
    # s1024b2: eight times the tokens per step (issue 46), where the GEMMs are no longer bound by streaming the
    # frozen weights: the LoRA-MFU of real batches, at its own frame (the GEMM shapes of 2048 tokens).
    return [Workload(f"{prefix}-{dtype}", model, 1, "single", ["eager", "compile"]),
            Workload(f"{prefix}-{dtype}-ddp2", model, 2, "ddp", ["eager"], dist="ddp"),
            Workload(f"{prefix}-{dtype}-fsdp2", model, 2, "fsdp", ["eager"], dist="fsdp2", note=fsdp_note),
            Workload(f"{prefix}-{dtype}-s1024b2", model, 1, "single", ["eager", "compile"], seq=1024, batch=2)]


@dataclass
class Run:
    side: str
    step_s: float
    tokens_per_s: float
    mem_mib: float       # peak RSS (CPU) or CUDA peak allocated (GPU)
    loss0: float
    flops_per_step: float = 0.0
    extra: dict = field(default_factory=dict)


def lorabench_sets(args, w, snapshot, frame, run):
    """The keys the benchmark sets on lorabench's side (the workload, equal to the peers')."""
    return {"run.output_dir": getattr(args, "run_dir", ""), "run.name": run, "model.path": snapshot, "model.dtype": args.dtype,
            "parallel.strategy": w.strategy, "run.steps": args.steps + args.warmup, "run.warmup_steps": args.warmup,
            "run.seed": SEED, "lora.r": LORA_R, "lora.alpha": LORA_ALPHA,
            "lora.targets": ",".join(lorabench_targets(hf_config(w.preset), LORA_R)), "data.seq_len": w.seq, "train.micro_batch": w.batch, "run.quiet": "true",
            "profile.peak_gflops": frame / 1e9, "parallel.device": args.device,
            # no planner probe before the steps: not part of the step, and a peer does nothing like it
            "run.predict": "false"}


def extra_lorabench_sets(args, w):
    """--lorabench-set KEY=VALUE, in order: keys beyond the benchmark's own (which define the equal work)."""
    own = lorabench_sets(args, w, "", 0.0, "")
    extra = {}
    for item in args.lorabench_set:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SystemExit(f"bench: --lorabench-set {item!r}: expected KEY=VALUE (e.g. model.cuda_attention=efficient)")
        if key in own:
            raise SystemExit(f"bench: --lorabench-set {key}: the benchmark sets {key} itself (the workload both "
                             "sides run); only other keys can be given")
        extra[key] = value
    return extra


def lorabench_cmd(args, w, snapshot, frame, run, extra=None):
    sets = {**lorabench_sets(args, w, snapshot, frame, run), **extra_lorabench_sets(args, w), **(extra or {})}
    cmd = mpirun(w.ranks, args.device) + [args.lorabench, os.path.join(ROOT, "inputs", "bench.ini")]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd


def run_lorabench(args, w, snapshot, frame, tag, env):
    run = f"{w.name}-{tag}"
    _, _, rss = measure_isolated(lorabench_cmd(args, w, snapshot, frame, run), env)
    path = os.path.join(args.run_dir, run, "run.h5")
    record = evidence.run_file_record(path)  # hashed now: the run directory is a temporary one
    s = record["summary"]
    # On a GPU the peers report CUDA's peak allocated bytes; lorabench's run file has the same figure.
    mem = s["mem_peak_bytes_max"] / 2**20 if args.device == "cuda" else rss
    step = s["step_time_median_s"]
    tokens = int(s["global_batch_size"]) * int(s["seq_len"])
    return Run("lorabench", step, tokens / step, mem, s["loss_first"], s["flops_per_step"],
               {"loss_last": s["loss_last"], "dtype": summary(path, "/config")["model.dtype"],
                # the step's roofline (docs/metrics.md): its lower bound at the bench's frame and the bandwidth
                # lorabench measured on the run's ranks at once; the same work for every side
                "roofline_bound_s": s.get("roofline_step_bound_s"), "roofline_limit": s.get("roofline_step_limit"),
                "mem_bandwidth": s.get("mem_bandwidth_per_rank"),
                "attention_kernel": summary(path, "/provenance").get("attention_kernel", "not recorded"),
                "comm_bytes_per_step": s.get("comm_bytes_per_step"), "run_file": record})


def peer_cmd(args, w, side, snapshot, port):
    """The command of a peer side: a peer_hf mode (eager, compile, liger) with the workload's --dist, or a
    DeepSpeed side (ds-*: eager transformers + peft in DeepSpeed's engine)."""
    ds = side.startswith("ds-")
    mode, dist = ("eager", side) if ds else (side, w.dist)
    script = [os.path.join(HERE, "peer_hf.py"), "--model", snapshot, "--mode", mode, "--device", args.device,
              "--dtype", args.dtype,
              "--seq", str(w.seq), "--batch", str(w.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
              "--threads", "1", "--seed", str(SEED + args.fault_peer_seed_offset), "--lora-r", str(LORA_R),
              "--lora-alpha", str(LORA_ALPHA)]
    if w.ranks == 1:
        return [sys.executable] + script
    return ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(w.ranks),
             "--master-addr", "127.0.0.1", "--master-port", str(port)] + script + ["--dist", dist])


def peer_env(args, side, env):
    """A DeepSpeed side runs on the table's device (DS_ACCELERATOR) and keeps the ops it compiles (fused and
    CPU Adam, its shared-memory comm) in lorabench's cache, where every later run reuses them."""
    if not side.startswith("ds-"):
        return env
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                         "lorabench", "deepspeed-ops")
    return dict(env, DS_ACCELERATOR=args.device, TORCH_EXTENSIONS_DIR=env.get("TORCH_EXTENSIONS_DIR", cache))


def run_peer(args, w, side, snapshot, env):
    port = 29500 + (os.getpid() % 400)
    out, _, rss = measure_isolated(peer_cmd(args, w, side, snapshot, port), peer_env(args, side, env))
    r = json.loads(out.strip().splitlines()[-1])
    mem = r["cuda_peak_mib"] if args.device == "cuda" else rss
    extra = {"losses": r["losses"], "dtype": r["dtype"]}
    for k in ("trainable", "deepspeed", "ds_config", "ds_estimate", "comm", "comm_bytes_per_step"):
        if k in r:
            extra[k] = r[k]
    return Run(r["peer"], r["step_time_s"], r["tokens_per_s"], mem, r["loss_step0"], extra=extra)


def plan_prediction(args, w, env):
    """lorabench's planner on the workload, before anything runs (`lorabench plan` with the benchmark's keys on
    the preset the snapshot is written from, the row of the workload's strategy and ranks): what it predicts per
    rank, bytes, and whether it fits this node."""
    tsv = os.path.join(args.run_dir, f"plan-{w.name}.tsv")
    sets = lorabench_sets(args, w, "", 1e9, f"{w.name}-plan")
    sets.pop("model.path")
    sets["model.preset"] = w.preset
    cmd = [args.lorabench, "plan", os.path.join(ROOT, "inputs", "bench.ini"), "-n", str(w.ranks),
           "--strategy", w.strategy, "--tsv", tsv]
    for k, v in {**sets, **extra_lorabench_sets(args, w)}.items():
        if not k.startswith("run."):
            cmd += ["--set", f"{k}={v}"]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench: lorabench plan failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    with open(tsv) as f:
        head, *rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    row = dict(zip(head, rows[0]))
    return {"rss_bytes": float(row["rss_bytes"]), "tensor_peak_bytes": float(row["tensor_peak_bytes"]),
            "model_state_bytes": float(row["model_state_bytes"]), "available_bytes": float(row["available_bytes"]),
            "fits": row["fits"] == "1", "device": row["device"], "command": " ".join(cmd[1:])}


def refuse_unfit(table):
    """--deepspeed: workloads the planner says do not fit this node are refused before any snapshot is written
    (the 7B table on a small machine), each with its figures."""
    lines = []
    for w in table:
        p = w.prediction
        if p and not p["fits"]:
            lines.append(f"{w.name}: lorabench plan predicts {p['rss_bytes'] / 2**30:.1f} GiB resident per rank for "
                         f"{w.strategy} on {w.ranks} ranks, {p['available_bytes'] / 2**30:.1f} GiB available per rank "
                         f"(lorabench {p['command']})")
    if lines:
        raise SystemExit("bench: REFUSED: does not fit this machine:\n  " + "\n  ".join(lines))


# What a side says when a micro-batch does not fit: CUDA's caching allocator (torch.OutOfMemoryError in the
# peers, c10::OutOfMemoryError in lorabench), a CUDA call that could not allocate, ATen's CPU allocator, and
# lorabench's refusal before it allocates (docs/plan.md). Any other failure stops the benchmark.
NO_FIT_MARKERS = ("out of memory", "can't allocate memory", "this run cannot fit")


def no_fit_reason(rc, text):
    """Why a failed run did not fit (its first line that says so), or None when it failed for another reason."""
    if rc == 0:
        return None
    for line in text.splitlines():
        if any(m in line.lower() for m in NO_FIT_MARKERS):
            return line.strip()[:240]
    if rc in (-9, 137):
        return f"killed by SIGKILL (exit {rc}; the kernel's OOM killer, if nothing else killed it)"
    return None


def sides_of(args, w):
    return ([] if args.peers_only else ["lorabench"]) + w.peers


def sweep_batch(args, w, env):
    """Each side's largest micro-batch: doubling from w.batch (which the table itself runs) up to --sweep-max,
    one warm-up and one measured step per try, until a try does not fit. Returns {side: (largest, why not
    the next)}."""
    snapshot = write_snapshot(w.preset, SEED)
    trial = argparse.Namespace(**vars(args))
    trial.steps, trial.warmup = 1, 1
    found = {}
    for side in sides_of(args, w):
        largest, b = w.batch, 2 * w.batch
        while b <= args.sweep_max:
            wb = replace(w, batch=b)
            t0 = time.time()
            if side == "lorabench":
                cmd = lorabench_cmd(trial, wb, snapshot, 1e9, f"{w.name}-sweep-b{b}", {"run.predict": "false"})
            else:
                cmd = peer_cmd(trial, wb, side, snapshot, 29500 + (os.getpid() % 400))
            out, err, _, rc = measure_isolated(cmd, env, check=False)
            reason = no_fit_reason(rc, out + err)
            print(f"  {w.name} sweep {side} micro-batch {b}: {'fits' if rc == 0 else 'does not fit'}, "
                  f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
            if rc != 0 and reason is None:
                sys.stderr.write(out + err)
                raise SystemExit(f"bench: {w.name}: {side} failed at micro-batch {b} (exit {rc}), "
                                 "not for lack of memory: " + " ".join(cmd))
            if rc != 0:
                why = f"{b} does not fit: {reason}"
                break
            largest, b = b, 2 * b
        else:
            why = f"{b} and above not tried (--sweep-max {args.sweep_max})"
        found[side] = (largest, why)
    return found


def calibrate(args, w, snapshot, env):
    cmd = [sys.executable, os.path.join(HERE, "frame.py"), "--model", snapshot, "--seq", str(w.seq),
           "--batch", str(w.batch), "--threads", "1", "--device", args.device, "--dtype", args.dtype]
    if args.quick:
        cmd += ["--rounds", "3", "--min-sample-s", "0.01"]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def versions(env):
    code = ("import importlib.metadata as m, json\n"
            "v = {}\n"
            "for p in ('torch', 'transformers', 'peft', 'accelerate', 'deepspeed', 'liger-kernel', 'triton'):\n"
            "    try: v[p] = m.version(p)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(v))")
    return json.loads(subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                     text=True, check=True).stdout)


REFERENCE_BF16 = ("this CPU has no AVX-512 (F, BW, VL, DQ): libtorch runs the peers' bf16 GEMMs with its "
                  "reference loops (1-10 GFLOP/s on one core against about 75 for its fp32 GEMM: 7x slower for "
                  "x @ W^T, 70-90x for dY @ W), while "
                  "lorabench runs each as an fp32 GEMM on the bf16 values widened (src/model/gemm.cpp)")


def reference_bf16_refusal(device, quick, allowed, cpuinfo="/proc/cpuinfo", dtype="bf16"):
    """Why the full bf16 CPU table is not started on a CPU where the peers' bf16 GEMMs are libtorch's
    reference loops (one 0.5B peer step takes minutes there, the table many hours), or None."""
    if device != "cpu" or quick or allowed or dtype != "bf16" or cpu_bf16_gemm_native(cpuinfo):
        return None
    return (f"bench: REFUSED: {REFERENCE_BF16}; one Qwen2.5-0.5B peer step would take minutes (its "
            "backward's dY @ W GEMMs alone run at about 1 GFLOP/s) and the table many hours. On this CPU "
            "--dtype fp32 compares every side in fp32; for bf16, run it on a CPU with AVX-512, or pass "
            "--allow-reference-bf16 to measure anyway (--quick runs the tiny shape).")


def machine_facts(args, env):
    facts = {"versions": versions(env), "cpus": os.cpu_count()}
    if args.device == "cuda":
        import torch
        facts["gpu"] = torch.cuda.get_device_name(0)
    if not args.peers_only:
        # NCCL_DEBUG logs to stdout (the doctor opens an NCCL communicator on a GPU): not into the JSON.
        quiet_nccl = {k: v for k, v in env.items() if k != "NCCL_DEBUG"}
        doc = subprocess.run([args.lorabench, "doctor", "--json"], env=quiet_nccl, stdout=subprocess.PIPE,
                             text=True).stdout
        blas = {c["name"]: c for c in json.loads(doc)["checks"]}["blas"]
        if blas["details"].get("kind") == "reference BLAS":
            raise SystemExit("bench: REFUSED: the reference BLAS is loaded (" + blas["message"] + ")")
        facts["blas"] = blas["message"]
    cpu, flags = "unknown", []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = [x for x in line.split(":", 1)[1].split() if x.startswith(("avx", "amx")) or x == "fma"]
    torch_cfg = subprocess.run([sys.executable, "-c", "import torch;print(torch.__config__.show())"],
                               env=env, stdout=subprocess.PIPE, text=True).stdout
    facts.update(cpu=cpu, isa=" ".join(flags),
                 torch_kernels="; ".join(l.strip() for l in torch_cfg.splitlines()
                                         if "CPU capability" in l or "MKL-DNN" in l),
                 load_before=os.getloadavg())
    return facts


def check_equal_work(w, ours, run, dtype):
    """Fails the benchmark loudly when a side ran in another dtype or its step-0 loss differs from lorabench's."""
    if run.extra.get("dtype") != dtype:
        raise SystemExit(f"bench: INVALID: {w.name}: {run.side} ran in {run.extra.get('dtype')}, not {dtype}")
    if not loss_matches(ours, run.loss0, loss_rtol(dtype)):
        raise SystemExit(f"bench: INVALID: {w.name}: {run.side} step-0 loss {run.loss0:.6f} != lorabench's "
                         f"{ours:.6f} (relative {abs(run.loss0 - ours) / abs(ours):.2e} > {loss_rtol(dtype):g}): "
                         "the sides do not compute the same thing")


def frame_key(w):
    return (w.preset, w.seq, w.batch)


def best_frame(measurements):
    """The frame of several bench/frame.py measurements of one shape set: each GEMM shape at its best rate
    over all of them (noise only ever slows a GEMM down), FLOP-weighted as frame.py weights one measurement.
    It is at least the best single measurement, and less sensitive to which shapes a slow spell hit."""
    best = {}
    for m in measurements:
        for x in m["shapes"]:
            best[x["name"]] = max(best.get(x["name"], 0.0), x["best_gflops"])
    flops = seconds = 0.0
    for x in measurements[0]["shapes"]:
        f = 2.0 * x["mkn"][0] * x["mkn"][1] * x["mkn"][2] * x["count"]
        flops, seconds = flops + f, seconds + f / (best[x["name"]] * 1e9)
    return flops / seconds


def bench_workload(args, w, env, frames, runs, progress=lambda: None):
    """Fills runs {side: [Run per round]}, calling progress() after every run."""
    snapshot = write_snapshot(w.preset, SEED)
    frame = frames[frame_key(w)][0]["frame_flops_per_s"]
    sides = sides_of(args, w)
    runs.update({s: [] for s in sides})
    ref_loss = None  # the first side of round 0 (lorabench unless --peers-only) sets the reference
    for r in range(args.rounds):
        if r > 0:  # the frame again between rounds: its best over the whole benchmark is the figure used
            frames[frame_key(w)].append(calibrate(args, w, snapshot, env))
        order = sides[r % len(sides):] + sides[:r % len(sides)]  # rotate: no side always goes first
        for side in order:
            t0 = time.time()
            if side == "lorabench":
                run = run_lorabench(args, w, snapshot, frame, f"r{r}", env)
            else:
                run = run_peer(args, w, side, snapshot, env)
            runs[side].append(run)
            print(f"  {w.name} round {r} {run.side}: {run.step_s:.3f} s/step, {run.tokens_per_s:.1f} tokens/s, "
                  f"{run.mem_mib:.0f} MiB, step-0 loss {run.loss0:.6f}, {time.time() - t0:.0f} s",
                  file=sys.stderr, flush=True)
            progress()
            ref_loss = run.loss0 if ref_loss is None else ref_loss
            check_equal_work(w, ref_loss, run, args.dtype)


def step_flops(w, runs):
    """The global step's LoRA FLOPs (docs/metrics.md), the same for every side; lorabench's own record of
    them must agree, or the MFU column would mean two things."""
    cfg = hf_config(w.preset)
    flops = lora_flops_per_token(cfg, w.seq, LORA_R, lorabench_targets(cfg, LORA_R)) * w.seq * w.batch * w.ranks
    for run in runs.get("lorabench", []):
        if abs(run.flops_per_step - flops) > 1e-9 * flops:
            raise SystemExit(f"bench: {w.name}: lorabench counts {run.flops_per_step:.6g} FLOPs per step, "
                             f"frame.lora_flops_per_token {flops:.6g}: the two formulas disagree")
    return flops


def med(xs):
    return statistics.median(xs)


def roofline_of(ours, step_s):
    """The workload's roofline bound per step (the median of lorabench's runs' roofline_step_bound_s: the
    compute phases' bytes and FLOPs per rank at the bench's frame and the bandwidth lorabench measured with
    the workload's ranks at once), the same for every side, and how much of it a side's step achieves. None
    where lorabench did not run or its files predate the roofline."""
    bounds = [x.extra.get("roofline_bound_s") for x in (ours or [])]
    if not bounds or any(b is None for b in bounds):
        return {"roofline_bound_s": None, "roofline_percent": None, "roofline_limit": None,
                "bandwidth_gbs": None}
    bound = med(bounds)
    limits = sorted({x.extra.get("roofline_limit") for x in ours})
    return {"roofline_bound_s": bound, "roofline_percent": 100 * bound / step_s, "roofline_limit": "/".join(limits),
            "bandwidth_gbs": med([x.extra["mem_bandwidth"] for x in ours]) / 1e9}


def summarise(args, results, frames):
    """The table's figures as numbers, which render() formats and --evidence stores, so that the evidence
    holds what the table shows: one row per workload and side (medians over the rounds; lorabench's speedup
    and memory ratio against the side), the DDP scaling of each side, and each frame."""
    rows = []
    for w, runs in results:
        frame = best_frame(frames[frame_key(w)])
        flops = step_flops(w, runs)
        ours = runs.get("lorabench")
        for side, rs in runs.items():
            row = {"workload": w.name, "side": side,
                   "label": "lorabench " + w.strategy if side == "lorabench" else rs[0].side, "ranks": w.ranks,
                   "step_s": med([x.step_s for x in rs]), "tokens_per_s": med([x.tokens_per_s for x in rs]),
                   "mem_mib": med([x.mem_mib for x in rs]), "loss0": rs[0].loss0, "speedup": None, "mem_ratio": None}
            row["mfu_percent"] = 100 * flops / row["step_s"] / (frame * w.ranks)
            row.update(roofline_of(ours, row["step_s"]))
            if ours and side != "lorabench":
                row["speedup"] = med([x.tokens_per_s for x in ours]) / row["tokens_per_s"]
                row["mem_ratio"] = med([x.mem_mib for x in ours]) / row["mem_mib"]
            if getattr(args, "deepspeed", False):
                row.update(deepspeed_columns(w, side, rs, row["mem_mib"]))
            rows.append(row)
    scaling = []
    names = {w.name: runs for w, runs in results}
    prefix = workload_prefix(args.model)
    multi, single = f"{prefix}-{args.dtype}-ddp2", f"{prefix}-{args.dtype}"
    if multi in names and single in names:
        for side in ("lorabench", "eager"):
            if side in names[multi] and side in names[single]:
                eff = (med([x.tokens_per_s for x in names[multi][side]])
                       / (2 * med([x.tokens_per_s for x in names[single][side]])))
                scaling.append({"workload": multi, "side": side, "label": names[multi][side][0].side,
                                "ranks": 2, "percent": 100 * eff})
    frame_rows = []
    for (preset, seq, batch), fr in frames.items():
        fs = [f["frame_flops_per_s"] / 1e9 for f in fr]
        frame_rows.append({"preset": preset, "seq": seq, "batch": batch, "gflops": best_frame(fr) / 1e9,
                           "measured_gflops": fs, "spread_percent": 100 * (max(fs) - min(fs)) / max(fs),
                           "how": fr[0]["how"]})
    out = {"rows": rows, "ddp_scaling": scaling, "frames": frame_rows}
    if getattr(args, "deepspeed", False):
        out["deepspeed_targets"] = deepspeed_targets(rows)
    return out


def deepspeed_columns(w, side, rs, measured_mib):
    """--deepspeed: a row's bytes per step (lorabench's counters or DeepSpeed's comms logger, rank 0, median over
    the rounds) and the memory predicted before the run (lorabench's planner: RSS per rank; DeepSpeed's
    estimator: its model states per rank) against the peak RSS measured."""
    comm = [x.extra.get("comm_bytes_per_step") for x in rs]
    cols = {"comm_bytes_per_step": None if any(c is None for c in comm) else med(comm),
            "comm_counted_by": "lorabench's counters" if side == "lorabench" else "DeepSpeed's comms logger",
            "predicted_mem_mib": None, "predicted_by": None, "predicted_ratio": None}
    if side == "lorabench" and w.prediction and w.prediction["device"] == "cuda":  # measured: CUDA peak allocated
        cols.update(predicted_mem_mib=w.prediction["tensor_peak_bytes"] / 2**20,
                    predicted_by="lorabench plan (tensor peak / rank)")
    elif side == "lorabench" and w.prediction:
        cols.update(predicted_mem_mib=w.prediction["rss_bytes"] / 2**20, predicted_by="lorabench plan (RSS / rank)")
    elif rs[0].extra.get("ds_estimate"):
        e = rs[0].extra["ds_estimate"]
        cols.update(predicted_mem_mib=e["per_rank_bytes"] / 2**20,
                    predicted_by=f"DeepSpeed {e['function']} (model states / rank)")
    if cols["predicted_mem_mib"] is not None:
        cols["predicted_ratio"] = cols["predicted_mem_mib"] / measured_mib
    return cols


def deepspeed_targets(rows):
    """Each DeepSpeed side against lorabench in its workload: tokens/s at least DEEPSPEED_SPEEDUP_TARGET x, peak
    RSS per rank no more, and lorabench's planner closer to its measured memory than DeepSpeed's estimator to
    DeepSpeed's (|predicted / measured - 1|)."""
    out = []
    ours = {r["workload"]: r for r in rows if r["side"] == "lorabench"}
    for r in rows:
        o = ours.get(r["workload"])
        if r["side"] == "lorabench" or o is None:
            continue
        err_ours = None if o["predicted_ratio"] is None else abs(o["predicted_ratio"] - 1)
        err_ds = None if r["predicted_ratio"] is None else abs(r["predicted_ratio"] - 1)
        out.append({"workload": r["workload"], "side": r["label"], "speedup": r["speedup"],
                    "speedup_target": DEEPSPEED_SPEEDUP_TARGET,
                    "speedup_met": r["speedup"] >= DEEPSPEED_SPEEDUP_TARGET, "mem_ratio": r["mem_ratio"],
                    "memory_met": r["mem_ratio"] <= 1.0, "planner_error": err_ours, "estimator_error": err_ds,
                    "prediction_met": None if err_ours is None or err_ds is None else err_ours < err_ds})
    return out


def render(args, facts, figures, results, sweeps):
    lines = []
    add = lines.append
    v = facts["versions"]
    add(f"machine: {facts['cpu']}, {facts['cpus']} CPUs, ISA: {facts['isa']}"
        + (f"; GPU: {facts['gpu']}" if "gpu" in facts else ""))
    add(f"libtorch: {facts['torch_kernels']}")
    if args.device == "cpu" and args.dtype == "bf16" and not cpu_bf16_gemm_native():
        add(f"bf16 GEMMs: {REFERENCE_BF16}")
    if "blas" in facts:
        add(f"BLAS: {facts['blas']}")
    add("versions: " + ", ".join(f"{k} {x}" for k, x in v.items()))
    add(f"load average before: {', '.join(f'{x:.2f}' for x in facts['load_before'])}; "
        f"after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    add(f"host noise (bench/host_noise.py: one bf16 GEMM timed in short windows) before: "
        f"{facts['noise_before']['line']}; after: {facts['noise_after']['line']}")
    add(f"{args.steps} measured steps after {args.warmup} warm-up per run, {args.rounds} rotating rounds, medians; "
        f"{args.dtype}, LoRA r{LORA_R} alpha {LORA_ALPHA} on q,k,v,o,gate,up,down, AdamW lr 1e-4, 1 thread per "
        f"rank, synthetic tokens (seed {SEED}); step-0 losses equal within {loss_rtol(args.dtype):g} relative "
        "(checked: VALID)")
    add("")
    mem_name = "CUDA peak allocated (MiB)" if args.device == "cuda" else "peak RSS (MiB)"
    add(f"| workload | side | ranks | step (s) | tokens/s | LoRA-MFU | roofline bound (s) | of the bound | "
        f"{mem_name} | step-0 loss | lorabench speedup | lorabench memory / side |")
    add("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in figures["rows"]:
        ratio = "" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        mem_ratio = "" if r["mem_ratio"] is None else f"{r['mem_ratio']:.2f}"
        bound = "" if r.get("roofline_bound_s") is None else f"{r['roofline_bound_s']:.3f} ({r['roofline_limit']})"
        achieved = "" if r.get("roofline_percent") is None else f"{r['roofline_percent']:.1f}%"
        add(f"| {r['workload']} | {r['label']} | {r['ranks']} | {r['step_s']:.3f} | {r['tokens_per_s']:.1f} | "
            f"{r['mfu_percent']:.1f}% | {bound} | {achieved} | {r['mem_mib']:.0f} | {r['loss0']:.5f} | {ratio} | "
            f"{mem_ratio} |")
    add("")
    for f in figures["frames"]:
        fs = f["measured_gflops"]
        add(f"- LoRA-MFU frame for {f['preset']}, seq {f['seq']}, micro-batch {f['batch']}: {f['gflops']:.1f} GFLOP/s "
            f"per rank, every GEMM shape at its best over {len(fs)} measurements, the same figure for every side; "
            f"measured {', '.join(f'{x:.1f}' for x in fs)} (before the first run, between rounds, after the last; "
            f"spread {f['spread_percent']:.1f}% of the best): {f['how']}")
    add("- LoRA-MFU = the LoRA FLOPs per step of docs/metrics.md (lorabench's record of them checked) / step time "
        "/ (frame x ranks), the same FLOPs for every side")
    bws = sorted({f"{r['workload']} {r['bandwidth_gbs']:.1f}" for r in figures["rows"] if r.get("bandwidth_gbs")})
    if bws:
        add("- roofline bound = the sum over forward, backward and optimizer of max(FLOPs / frame, bytes / bandwidth) per "
            "rank (docs/metrics.md, \"Bytes and the roofline\"; compute or memory: the limit of the step), from "
            "lorabench's run files: the frame above and the memory bandwidth lorabench measured per rank with the "
            "workload's ranks at once (GB/s: " + ", ".join(bws) + "); the same work, so the same bound, for every "
            "side; of the bound = bound / the side's step time")
    kernels = sorted({x.extra.get("attention_kernel", "") for _, runs in results for x in runs.get("lorabench", [])})
    if kernels:
        add(f"- lorabench's attention kernel (its run files' /provenance/attention_kernel): {', '.join(kernels)}")
    if args.lorabench_set:
        add("- lorabench ran with these keys beyond the benchmark's (--lorabench-set): "
            + ", ".join(f"`{x}`" for x in args.lorabench_set))
    for name, found in sweeps.items():
        add(f"- {name}, the largest micro-batch each side fits (doubling, 1 warm-up + 1 step per try): "
            + "; ".join(f"{side if side == 'lorabench' else 'hf-' + side} {b} ({why})"
                        for side, (b, why) in found.items()))
    for w, _ in results:
        if w.note:
            add(f"- {w.name}: {w.note}")
    for x in figures["ddp_scaling"]:
        add(f"- DDP scaling on 2 ranks, {x['label']}: {x['percent']:.1f}%")
    if args.device == "cpu":
        add("- peak RSS: the largest resident set of any one process of the run (ru_maxrss of the waited-for "
            "children), the same way for every side; it includes the snapshot pages mapped while loading (lorabench "
            "releases each tensor's pages once copied)")
    if getattr(args, "deepspeed", False):
        lines += render_deepspeed(figures, results)
    return "\n".join(lines)


def render_deepspeed(figures, results):
    """--deepspeed: bytes per step and the predictions against measured memory, the targets, the ds_configs."""
    lines = ["", "| workload | side | bytes / step (MiB) | counted by | predicted memory / rank (MiB) | predicted by | "
             "predicted / measured |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in figures["rows"]:
        b = "" if r.get("comm_bytes_per_step") is None else f"{r['comm_bytes_per_step'] / 2**20:.2f}"
        p = "" if r.get("predicted_mem_mib") is None else f"{r['predicted_mem_mib']:.0f}"
        q = "" if r.get("predicted_ratio") is None else f"{r['predicted_ratio']:.2f}"
        lines.append(f"| {r['workload']} | {r['label']} | {b} | {r['comm_counted_by']} | {p} | {r['predicted_by'] or ''} "
                     f"| {q} |")
    lines.append("")
    lines.append("- bytes / step: the payload each rank hands to the collectives per measured step (the send side: the "
                 "whole input of a reduce-scatter, the shard of an all-gather), rank 0, the same convention on both "
                 "sides; DeepSpeed's from its comms logger (comms_logger.prof_all)")
    lines.append("- predicted memory: lorabench's planner predicts the whole resident set per rank (model state, "
                 "activations, buffers and the process's own footprint; docs/plan.md); DeepSpeed's estimators predict "
                 "the model states only (parameters, gradients, optimizer states of every parameter, trainable or "
                 "not), per rank = device + host / ranks on one node")
    for t in figures.get("deepspeed_targets", []):
        pred = ("" if t["prediction_met"] is None else
                f"; planner off by {100 * t['planner_error']:.0f}%, DeepSpeed's estimator by "
                f"{100 * t['estimator_error']:.0f}%: {'met' if t['prediction_met'] else 'MISSED'}")
        lines.append(f"- target, {t['workload']} against {t['side']}: tokens/s {t['speedup']:.2f}x "
                     f"(>= {DEEPSPEED_SPEEDUP_TARGET}x: {'met' if t['speedup_met'] else 'MISSED'}), peak RSS per rank "
                     f"{t['mem_ratio']:.2f}x (<= 1: {'met' if t['memory_met'] else 'MISSED'}){pred}")
    for w, runs in results:
        for side, rs in runs.items():
            if rs and rs[0].extra.get("ds_config"):
                lines.append(f"- ds_config of {rs[0].side} ({w.name}, DeepSpeed {rs[0].extra['deepspeed']}): "
                             f"`{json.dumps(rs[0].extra['ds_config'], separators=(',', ':'))}`")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lorabench", default=os.path.join(ROOT, "build", "src", "app", "lorabench"))
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="auto: cuda when torch sees a GPU (the GPU table), else cpu")
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-0.5b",
                    help="the workloads' model (Qwen2.5-0.5B, Qwen3-0.6B or Qwen3.5-0.8B's text model; --quick: the "
                         "family's tiny shape)")
    ap.add_argument("--rounds", type=int, default=3, help="rotating rounds per workload")
    ap.add_argument("--steps", type=int, default=5, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up steps per run (torch.compile compiles here)")
    ap.add_argument("--only", nargs="*", default=None, help="workload names")
    ap.add_argument("--quick", action="store_true",
                    help="tiny shape, 1 round, 2 steps: lorabench and the eager peer (the equal-work test)")
    ap.add_argument("--sweep-batch", action="store_true",
                    help="first find each side's largest micro-batch (doubling up to --sweep-max until it does not "
                         "fit), then also run the table at the largest one every side fits")
    ap.add_argument("--sweep-max", type=int, default=256, help="the largest micro-batch --sweep-batch tries")
    ap.add_argument("--peers-only", action="store_true", help="only the peers (no lorabench side)")
    ap.add_argument("--deepspeed", action="store_true",
                    help="the DeepSpeed table instead: lorabench zero2 and fsdp against DeepSpeed ZeRO-2 and ZeRO-3 "
                         "(with and without offload) on 2 ranks, with bytes per step and predicted memory")
    ap.add_argument("--lorabench-set", action="append", default=[], metavar="KEY=VALUE",
                    help="another lorabench key for its side (repeatable; e.g. model.cuda_attention=efficient), "
                         "named in the table; not one the benchmark sets itself")
    ap.add_argument("--out", default=None, help="also write the Markdown table here")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--evidence", default=None, metavar="DIR",
                    help="also write the run as an evidence file, DIR/<machine family>/<UTC date>-<commit>[-<tag>]"
                         ".json (bench/evidence.py; scripts/results-doc.py makes docs/results.md from results/)")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                    help="every side's model dtype (lorabench's model.dtype); bf16 is the benchmark's")
    ap.add_argument("--allow-reference-bf16", action="store_true",
                    help="run the full CPU table even where the peers' bf16 GEMMs are libtorch's reference loops")
    ap.add_argument("--cpuinfo", default="/proc/cpuinfo", help=argparse.SUPPRESS)  # tests: another CPU's flags
    ap.add_argument("--fault-peer-seed-offset", type=int, default=0,
                    help="for the equal-work test: the peers draw another seed's tokens, which must fail the check")
    args = ap.parse_args()
    if args.device == "auto":
        import torch
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    refusal = reference_bf16_refusal(args.device, args.quick, args.allow_reference_bf16, args.cpuinfo, args.dtype)
    if refusal:
        print(refusal, file=sys.stderr)
        sys.exit(2)
    if args.deepspeed:
        import importlib.metadata  # the peers run on this interpreter (sys.executable)
        try:
            importlib.metadata.version("deepspeed")
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(f"bench: --deepspeed: DeepSpeed is not installed in {sys.prefix} (scripts/install-deps.sh "
                             "installs bench/requirements-peers-deepspeed.txt there)")
    if args.quick:
        args.rounds, args.steps, args.warmup = 1, 2, 1
    table = workloads(args.device, args.quick, args.dtype, args.model, args.deepspeed)
    if args.only:
        unknown = set(args.only) - {w.name for w in table}
        if unknown:
            raise SystemExit(f"bench: unknown workload(s) {sorted(unknown)} for {args.device} in {args.dtype} "
                             f"(known: {[w.name for w in table]})")
        table = [w for w in table if w.name in args.only]
    for w in table:
        extra_lorabench_sets(args, w)  # a bad --lorabench-set stops here, before anything is measured
    if args.evidence:
        os.makedirs(args.evidence, exist_ok=True)  # an unwritable DIR fails now, not after the runs
    started = evidence.utc_now()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore::FutureWarning")
    facts = machine_facts(args, env)
    noise_s = 2 if args.quick else 10
    facts["noise_before"] = host_noise(noise_s, args.device, env)
    args.run_dir = tempfile.mkdtemp(prefix="lorabench-bench-")
    sweeps = {}
    for w in list(table) if args.sweep_batch else []:
        sweeps[w.name] = sweep_batch(args, w, env)
        common = min(b for b, _ in sweeps[w.name].values())
        if common > w.batch:
            table.append(replace(w, name=f"{w.name}-b{common}", batch=common,
                                     note=f"micro-batch {common}: the largest every side fits (--sweep-batch)"))
    if args.deepspeed and not args.peers_only:
        for w in table:
            w.prediction = plan_prediction(args, w, env)  # before anything runs, as a user plans a run
        refuse_unfit(table)
    # One frame per shape and token count: measured before the first run (here), between rounds and after the last.
    frames = {}
    for w in table:
        if frame_key(w) not in frames:
            frames[frame_key(w)] = [calibrate(args, w, write_snapshot(w.preset, SEED), env)]
    results = []

    def dump_json(complete):
        """--json, rewritten after every run (complete false until the end): a benchmark cut off by a time
        limit (the lent GPU machine's) still leaves every run it finished."""
        if not args.json:
            return
        with open(args.json + ".part", "w") as f:
            json.dump(evidence.finite({"complete": complete, "machine": facts, "sweeps": sweeps,
                       "frames": {"/".join(map(str, k)): v for k, v in frames.items()}, "results": [
                           {"workload": w.__dict__, "runs": {s: [r.__dict__ for r in rs] for s, rs in runs.items()}}
                           for w, runs in results]}), f, indent=1)
        os.replace(args.json + ".part", args.json)

    for w in table:
        results.append((w, {}))
        bench_workload(args, w, env, frames, results[-1][1], progress=lambda: dump_json(False))
    for key, fr in frames.items():  # and once after the last run
        w = next(x for x in table if frame_key(x) == key)
        fr.append(calibrate(args, w, write_snapshot(w.preset, SEED), env))
    facts["noise_after"] = host_noise(noise_s, args.device, env)
    table_figures = summarise(args, results, frames)
    text = render(args, facts, table_figures, results, sweeps)
    print(text)
    print(f"\nrun files: {args.run_dir}")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    dump_json(True)
    if args.evidence:
        path = write_evidence(args, facts, table_figures, results, frames, sweeps, started)
        print(f"evidence: {path}")


def evidence_tag(args):
    """What sets this run apart from the device's full bf16 table, for the evidence file's name (none for that
    table itself): the model when not Qwen2.5-0.5B, quick, the dtype, gpu, only-<workloads>, sweep, set
    (--lorabench-set), peers-only."""
    parts = [args.model] if args.model != "qwen2.5-0.5b" else []
    parts += (["quick"] if args.quick else []) + (["gpu"] if args.device == "cuda" else [])
    parts += [args.dtype] if args.dtype != "bf16" else []
    parts += ["only-" + "+".join(args.only)] if args.only else []
    parts += (["sweep"] if args.sweep_batch else []) + (["set"] if args.lorabench_set else [])
    parts += ["deepspeed"] if args.deepspeed else []
    return "-".join(parts + (["peers-only"] if args.peers_only else []))


def write_evidence(args, facts, figures, results, frames, sweeps, started):
    """--evidence: the run and the figures of its table (summarise) as an evidence file; returns its path."""
    machine = evidence.machine_description(None if args.peers_only else args.lorabench, facts["versions"],
                                           facts.get("gpu"))
    machine.update({k: facts[k] for k in ("blas", "torch_kernels") if k in facts},
                   load_before=facts["load_before"], load_after=os.getloadavg())
    workloads = ", ".join(w.name for w, _ in results)
    peers = "DeepSpeed (transformers + peft)" if args.deepspeed else "transformers + peft"
    title = (f"lorabench against {peers}, {args.device.upper() if args.device == 'cpu' else 'GPU'}, "
             f"{args.dtype}" + (", --quick" if args.quick else "") + f": {workloads}")
    settings = {k: getattr(args, k) for k in ("device", "model", "dtype", "rounds", "steps", "warmup", "quick", "only",
                                             "lorabench_set", "sweep_batch", "peers_only", "lorabench", "deepspeed")}
    settings.update(seed=SEED, lora_r=LORA_R, lora_alpha=LORA_ALPHA, loss_rtol=loss_rtol(args.dtype),
                    memory=("CUDA peak allocated (MiB)" if args.device == "cuda" else "peak RSS (MiB)"),
                    run_dir=args.run_dir)
    body = {"settings": settings, "valid": True, "table": figures, "sweeps": sweeps,
            "frame_measurements": {"/".join(map(str, k)): v for k, v in frames.items()},
            "workloads": [{**w.__dict__, "runs": {s: [r.__dict__ for r in rs] for s, rs in runs.items()}}
                          for w, runs in results]}
    noise = {"before": facts["noise_before"], "after": facts["noise_after"], "quiet_cv": QUIET_CV}
    return evidence.write(args.evidence, "bench", title, started, machine, noise, body, evidence_tag(args))


if __name__ == "__main__":
    main()
