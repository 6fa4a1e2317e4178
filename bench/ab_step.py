#!/usr/bin/env python3
"""Two lorabench builds or settings on the same workload, alternating A, B, A, B, ...: step-time medians and
the ratio, for a choice that only a whole training step can settle (a build option: two build trees; an
input key: one binary, --b-set KEY=VALUE). Each run is the bench workload of inputs/bench.ini, single
rank, one thread:

  python3 bench/ab_step.py --a build/src/app/lorabench --b other/src/app/lorabench --dtype fp32
  python3 bench/ab_step.py --a build/src/app/lorabench --b-set model.fused_kernels=false
"""
import argparse
import os
import statistics
import subprocess
import tempfile

from benchlib import summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary, args, out_dir, name, extra):
    cmd = [binary, os.path.join(ROOT, "inputs", "bench.ini"), "--set", f"run.output_dir={out_dir}",
           "--set", f"run.name={name}", "--set", f"model.preset={args.preset}", "--set", f"model.dtype={args.dtype}",
           "--set", f"run.steps={args.steps + args.warmup}", "--set", f"run.warmup_steps={args.warmup}",
           "--set", "run.quiet=true"]
    for kv in extra:
        cmd += ["--set", kv]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ab_step: {binary} failed ({r.returncode}):\n{r.stderr}")
    s = summary(os.path.join(out_dir, name, "run.h5"))
    return s["step_time_median_s"], s["loss_last"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="lorabench binary A")
    ap.add_argument("--b", default=None, help="lorabench binary B (default: A's)")
    ap.add_argument("--a-set", action="append", default=[], metavar="KEY=VALUE", help="input override for A only")
    ap.add_argument("--b-set", action="append", default=[], metavar="KEY=VALUE", help="input override for B only")
    ap.add_argument("--preset", default="qwen2.5-0.5b")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    args.b = args.b or args.a
    times = {"A": [], "B": []}
    losses = {}
    with tempfile.TemporaryDirectory(prefix="lorabench-ab-") as out:
        for i in range(args.rounds):
            for tag, binary, extra in (("A", args.a, args.a_set), ("B", args.b, args.b_set)):
                t, loss = run(binary, args, out, f"{tag}{i}", extra)
                times[tag].append(t)
                losses.setdefault(tag, loss)
                print(f"round {i + 1} {tag}: step median {t:.3f} s, last loss {loss:.6f}", flush=True)
    ma, mb = statistics.median(times["A"]), statistics.median(times["B"])
    print(f"\n{args.preset} {args.dtype}, {args.rounds} alternating rounds of {args.steps} steps (+{args.warmup} warm-up)")
    print(f"A {args.a} {' '.join(args.a_set)}: median {ma:.3f} s  ({', '.join(f'{t:.3f}' for t in times['A'])})")
    print(f"B {args.b} {' '.join(args.b_set)}: median {mb:.3f} s  ({', '.join(f'{t:.3f}' for t in times['B'])})")
    print(f"B / A step time: {mb / ma:.3f}; last loss A {losses['A']:.6f}, B {losses['B']:.6f}")


if __name__ == "__main__":
    main()
