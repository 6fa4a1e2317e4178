#!/usr/bin/env python3
"""The strategies against each other on one machine (docs/performance.md, "Strategies"):

A. qwen2.5-0.5b shape, bf16, seq 256, micro-batch 1, LoRA r16 on all seven projections, one thread per rank:
   single on 1 rank; ddp, zero1, zero2, fsdp on 2 ranks; alternating rounds, medians. Reports DDP's
   scaling efficiency and exposed communication, FSDP's peak memory and tokens/s against DDP's.
B. Full fine-tuning of the `small` preset (fp32) with every strategy on 2 ranks: measured model state
   (tensor memory held between steps) against the ZeRO-accounting prediction.

    scripts/bench-strategies.sh [--rounds N] [--steps N] [--out DIR]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from benchlib import mpirun, summary

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(args, name, ranks, sets, env):
    cmd = mpirun(ranks) + [args.lorabench, os.path.join(ROOT, "inputs", "bench.ini"),
                           "--set", f"run.output_dir={args.out}", "--set", f"run.name={name}",
                           "--set", "run.quiet=true"] + [x for s in sets for x in ("--set", s)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"strategies: run {name} failed ({p.returncode})")
    return os.path.join(args.out, name, "run.h5")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lorabench", default=os.path.join(ROOT, "build", "src", "app", "lorabench"))
    ap.add_argument("--report", default=os.path.join(ROOT, "build", "postprocess", "lorabench-report"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="measured steps per run (+2 warm-up)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-full", action="store_true", help="skip part B")
    args = ap.parse_args()
    args.out = args.out or tempfile.mkdtemp(prefix="lorabench-strategies-")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    steps = [f"run.steps={args.steps + 2}", "run.warmup_steps=2"]

    # ---- A: the 0.5B LoRA workload ----
    strategies = [("single", 1), ("ddp", 2), ("zero1", 2), ("zero2", 2), ("fsdp", 2)]
    res = {s: [] for s, _ in strategies}
    files = []
    for r in range(args.rounds):
        order = strategies if r % 2 == 0 else list(reversed(strategies))
        for s, n in order:
            f = run(args, f"{s}-r{r}", n, steps + [f"parallel.strategy={s}"], env)
            files.append(f)
            res[s].append(summary(f))
            print(f"  round {r} {s}: {res[s][-1]['step_time_median_s']:.3f} s/step", file=sys.stderr)
    comm_file = os.path.join(args.out, "comm-2.h5")
    subprocess.run(mpirun(2) + [args.lorabench, "comm", "--ops", "all_reduce,all_gather,reduce_scatter",
                                "--min-bytes", "64K", "--max-bytes", "64M", "--factor", "4", "-o", comm_file],
                   env=env, stdout=subprocess.DEVNULL, check=True)
    files.append(comm_file)

    med = lambda s, k: statistics.median(x[k] for x in res[s])
    print("## A. qwen2.5-0.5b, bf16, seq 256, micro-batch 1, LoRA r16 (all 7), 1 thread per rank")
    print()
    print("| strategy | ranks | step (s) | tokens/s | exposed comm | comm share | peak tensor mem / rank | "
          "model state / rank | peak RSS / rank |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s, n in strategies:
        step = med(s, "step_time_median_s")
        comm = med(s, "comm_exposed_s_rank_median")
        print(f"| {s} | {n} | {step:.3f} | {med(s, 'tokens_per_s_mean'):.1f} | {comm:.3f} s | "
              f"{100 * comm / step:.1f}% | {med(s, 'mem_peak_bytes_max') / 2**20:.0f} MiB | "
              f"{med(s, 'mem_current_bytes_max') / 2**20:.0f} MiB | {med(s, 'rss_peak_bytes_max') / 2**20:.0f} MiB |")
    eff = med("ddp", "tokens_per_s_mean") / (2 * med("single", "tokens_per_s_mean"))
    print()
    print(f"- DDP scaling efficiency (2 ranks vs 1): {100 * eff:.1f}% (target >= 90%)")
    ddp_comm = med("ddp", "comm_exposed_s_rank_median") / med("ddp", "step_time_median_s")
    print(f"- DDP exposed communication: {100 * ddp_comm:.1f}% of the step (target <= 3%)")
    mem = med("fsdp", "mem_peak_bytes_max") / med("ddp", "mem_peak_bytes_max")
    tok = med("fsdp", "tokens_per_s_mean") / med("ddp", "tokens_per_s_mean")
    print(f"- FSDP peak tensor memory / DDP: {mem:.3f} (target <= 0.60); FSDP tokens/s / DDP: {tok:.2f} "
          f"(target >= 0.80)")

    # ---- B: full fine-tuning, measured vs predicted model state ----
    if not args.skip_full:
        print()
        print("## B. Full fine-tuning of `small` (fp32), 2 ranks: model state held between steps")
        print()
        print("| strategy | measured (mem_current_bytes_max) | predicted | measured / predicted | formula |")
        print("| --- | --- | --- | --- | --- |")
        full = ["lora.enabled=false", "model.preset=small", "model.dtype=fp32", "run.steps=4",
                "run.warmup_steps=1"]
        for s, n in [("single", 1), ("ddp", 2), ("zero1", 2), ("zero2", 2), ("fsdp", 2)]:
            f = run(args, f"full-{s}", n, full + [f"parallel.strategy={s}"], env)
            files.append(f)
            v = summary(f)
            m, p = v["mem_current_bytes_max"], v["predicted_model_state_bytes"]
            print(f"| {s} ({n} rank{'s' if n > 1 else ''}) | {m / 2**20:.1f} MiB | {p / 2**20:.1f} MiB | "
                  f"{m / p:.3f} | `{v['predicted_formula']}` |")

    report = os.path.join(args.out, "report.md")
    subprocess.run([args.report] + files + ["-o", report], check=True, stdout=subprocess.DEVNULL)
    print()
    print(f"runs and report: {args.out} ({report})")


if __name__ == "__main__":
    main()
