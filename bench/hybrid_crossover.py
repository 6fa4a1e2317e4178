#!/usr/bin/env python3
"""Qwen3.5's two layer kinds against each other as the sequence grows: lorabench's Gated DeltaNet (linear
attention, a recurrent state per head) against its own gated full attention (T x T scores, computed in blocks),
step time and memory from T = 512 to 8192 (docs/performance.md, "Qwen3.5 on the CPU, and linear against full
attention").

Two models of the preset's widths that differ only in their token mixer: --layers decoder layers, all
linear_attention in one and all full_attention in the other, the same MLP, and a vocabulary of --vocab tokens
(the head is the same work for both and would otherwise dominate the step at these lengths). Each is trained
by lorabench (LoRA r16 on every projection the layers have, bf16, one rank, one thread) on synthetic tokens for
--warmup + --steps steps at each length, the two kinds alternating; per length and kind the median measured step,
lorabench's peak tensor memory and the process's peak RSS. The crossover is the shortest measured length at
which the linear layers' step is the faster one.

    bench/hybrid_crossover.py [--preset qwen3.5-0.8b] [--seqs 512,1024,2048,4096,8192] [--layers 2]
                              [--vocab 8192] [--steps 2] [--warmup 1] [--evidence results] [--out FILE.md]

--evidence DIR writes results/<family>/<date>-<commit>-crossover.json (bench/evidence.py), from which
scripts/results-doc.py writes its table in docs/results.md.
"""
import argparse
import os
import shutil
import sys
import tempfile

import evidence
from benchlib import QUIET_CV, host_noise, measure_isolated, mpirun
from equal_work import QWEN3_5_LINEAR, QWEN3_5_LINEAR_TARGETS, SEVEN, hf_config, lorabench_targets, write_config_snapshot

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KINDS = ("linear_attention", "full_attention")
SEED = 1234
LORA_R, LORA_ALPHA = 16, 32


def kind_config(preset, kind, layers, vocab):
    """The preset's config.json with `layers` layers of one kind and a vocabulary of `vocab` tokens."""
    return dict(hf_config(preset), num_hidden_layers=layers, layer_types=[kind] * layers, vocab_size=vocab)


def targets(cfg):
    """lorabench's LoRA targets that the model's layers have (a target no layer has is refused): the attention
    projections only with full-attention layers, the Gated DeltaNet ones only with linear layers."""
    kinds = set(cfg["layer_types"])
    drop = set() if "linear_attention" in kinds else set(QWEN3_5_LINEAR_TARGETS)
    if "full_attention" not in kinds:
        drop |= {t[:-len("_proj")] for t in SEVEN[:4]}  # q, k, v, o
    return [t for t in lorabench_targets(cfg, LORA_R) if t not in drop]


def run_lorabench(binary, snapshot, cfg, kind, seq, a, out_dir):
    name = f"{kind.split('_')[0]}-T{seq}"
    sets = {"model.path": snapshot, "model.dtype": a.dtype, "parallel.strategy": "single",
            "parallel.threads_per_rank": 1, "lora.r": LORA_R, "lora.alpha": LORA_ALPHA,
            "lora.targets": ",".join(targets(cfg)), "data.format": "synthetic", "data.seq_len": seq,
            "train.micro_batch": 1, "train.grad_accum": 1, "train.lr": 1e-4, "train.max_grad_norm": 0,
            "run.steps": a.warmup + a.steps, "run.warmup_steps": a.warmup, "run.seed": SEED,
            "run.output_dir": out_dir, "run.name": name, "run.quiet": "true", "run.predict": "false"}
    # mpirun with one rank bound to one core, as scripts/bench.sh runs lorabench; inputs/bench.ini underneath
    cmd = mpirun(1) + [binary, os.path.join(ROOT, "inputs", "bench.ini")]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    # its own helper process, so that the peak RSS is this run's alone (benchlib.measure_isolated)
    _, _, rss = measure_isolated(cmd, dict(os.environ, OMP_NUM_THREADS="1"))
    path = os.path.join(out_dir, name, "run.h5")
    record = evidence.run_file_record(path, ["step_time_median_s", "mem_peak_bytes_max", "loss_first", "loss_last",
                                             "flops_per_step", "model_layers"])
    s = record["summary"]
    return {"kind": kind, "seq": seq, "step": float(s["step_time_median_s"]),
            "tensor_peak": float(s["mem_peak_bytes_max"]), "rss_mib": rss, "run_file": record}


def crossover(rows):
    """The shortest length at which the linear layers' step is faster than full attention's, or None."""
    for r in rows:
        if r["full_over_linear"] > 1.0:
            return r["seq"]
    return None


def table_rows(runs, seqs):
    rows = []
    for seq in seqs:
        lin = next(r for r in runs if r["seq"] == seq and r["kind"] == "linear_attention")
        full = next(r for r in runs if r["seq"] == seq and r["kind"] == "full_attention")
        rows.append({"seq": seq, "linear_step": lin["step"], "full_step": full["step"],
                     "full_over_linear": full["step"] / lin["step"],
                     "linear_tokens_per_s": seq / lin["step"], "full_tokens_per_s": seq / full["step"],
                     "linear_tensor_peak": lin["tensor_peak"], "full_tensor_peak": full["tensor_peak"],
                     "linear_rss_mib": lin["rss_mib"], "full_rss_mib": full["rss_mib"]})
    return rows


def markdown(rows):
    lines = ["| T | linear step (s) | full step (s) | full / linear | linear tokens/s | full tokens/s | "
             "linear tensor peak (MiB) | full tensor peak (MiB) | linear RSS (MiB) | full RSS (MiB) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['seq']} | {r['linear_step']:.3f} | {r['full_step']:.3f} | {r['full_over_linear']:.2f} | "
                     f"{r['linear_tokens_per_s']:.1f} | {r['full_tokens_per_s']:.1f} | "
                     f"{r['linear_tensor_peak'] / 2**20:.1f} | {r['full_tensor_peak'] / 2**20:.1f} | "
                     f"{r['linear_rss_mib']:.0f} | {r['full_rss_mib']:.0f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lorabench", default=os.path.join(ROOT, "build", "src", "app", "lorabench"))
    ap.add_argument("--preset", default="qwen3.5-0.8b", choices=sorted(p for p in QWEN3_5_LINEAR),
                    help="the Qwen3.5 preset whose layer widths are measured")
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192", help="sequence lengths, comma-separated")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers of each model")
    ap.add_argument("--vocab", type=int, default=8192, help="the models' vocabulary")
    ap.add_argument("--steps", type=int, default=2, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--evidence", default=None, metavar="DIR")
    ap.add_argument("--out", default=None, help="also write the Markdown table here")
    ap.add_argument("--keep", default=None, metavar="DIR", help="keep the run directories here")
    a = ap.parse_args()
    try:
        seqs = sorted({int(x) for x in a.seqs.split(",") if x.strip()})
    except ValueError:
        ap.error(f"--seqs {a.seqs!r}: expected comma-separated integers")
    if not seqs or seqs[0] < 1 or a.layers < 1 or a.vocab < 2 or a.steps < 1 or a.warmup < 0:
        ap.error("--seqs, --layers, --vocab and --steps take positive values, --warmup a non-negative one")
    if not os.path.exists(a.lorabench):
        sys.exit(f"hybrid_crossover: {a.lorabench} not found (scripts/build.sh builds it)")
    started = evidence.utc_now()
    noise_before = host_noise(2.0)
    configs = {k: kind_config(a.preset, k, a.layers, a.vocab) for k in KINDS}
    snapshots = {k: write_config_snapshot(configs[k], f"{a.preset}-{k.split('_')[0]}-L{a.layers}-V{a.vocab}", SEED)
                 for k in KINDS}
    out_dir = a.keep or tempfile.mkdtemp(prefix="lorabench-crossover-")
    runs = []
    try:
        for i, seq in enumerate(seqs):
            order = KINDS if i % 2 == 0 else KINDS[::-1]  # alternate which kind goes first
            for kind in order:
                r = run_lorabench(a.lorabench, snapshots[kind], configs[kind], kind, seq, a, out_dir)
                runs.append(r)
                print(f"  T={seq} {kind}: {r['step']:.3f} s/step, tensor peak {r['tensor_peak'] / 2**20:.1f} MiB, "
                      f"RSS {r['rss_mib']:.0f} MiB", file=sys.stderr, flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(out_dir, ignore_errors=True)
    noise_after = host_noise(2.0)
    rows = table_rows(runs, seqs)
    cross = crossover(rows)
    text = markdown(rows)
    verdict = (f"the linear layers' step is the faster from T = {cross}" if cross is not None else
               f"full attention is the faster at every measured length (up to T = {seqs[-1]})")
    print(f"host noise before: {noise_before['line']}\nhost noise after: {noise_after['line']}")
    print(f"{a.preset}'s widths, {a.layers} layers of each kind, vocabulary {a.vocab}, {a.dtype}, one rank and thread, "
          f"median of {a.steps} steps after {a.warmup} warm-up\n\n{text}\n\n- crossover: {verdict}")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + f"\n\n- crossover: {verdict}\n")
    if a.evidence:
        machine = evidence.machine_description(a.lorabench)
        title = "Qwen3.5's linear against full attention layers by sequence length (bench/hybrid_crossover.py)"
        body = {"settings": {"preset": a.preset, "layers": a.layers, "vocab": a.vocab, "steps": a.steps,
                             "warmup": a.warmup, "dtype": a.dtype, "seqs": seqs, "lora_r": LORA_R, "threads": 1},
                "table": {"rows": rows, "crossover": cross}, "runs": runs}
        noise = {"before": noise_before, "after": noise_after, "quiet_cv": QUIET_CV}
        print("evidence:", evidence.write(a.evidence, "crossover", title, started, machine, noise, body, "crossover"))


if __name__ == "__main__":
    main()
