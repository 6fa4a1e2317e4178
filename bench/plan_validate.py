#!/usr/bin/env python3
"""The planner against measurement: every (model, strategy, world size) runs with its prediction recorded at
start, and the per-rank tensor peak and step time are compared (docs/plan.md, docs/results.md).

    bench/plan_validate.py [--presets small,qwen2.5-0.5b] [--worlds 1,2,4] [--steps 6] [--out DIR]

Per preset: `lorabench plan -n 1,2,4` for the record (plan-<preset>.md), then each run of inputs/bench.ini's
workload (bf16, seq 256, micro-batch 1, LoRA r16 on all seven projections, one thread per rank) with
run.predict on: rank 0 probes right before the run starts (the bandwidth measured on the run's ranks), so
prediction and measurement see the machine in the same state; on a shared VM whose speed drifts by tens of
percent over minutes, a prediction made minutes earlier would measure the drift. Predicted:
/metrics/summary predicted_tensor_peak_bytes and predicted_step_time_s; measured: mem_peak_bytes_max (max
over ranks of the step's tensor peak) and step_time_mean_s (mean over the measured steps). Targets: memory
within 10%, step time within 25%. Prints a Markdown table and the pass counts; exits 1 on a miss.
"""
import argparse
import os
import subprocess
import sys
import time

from benchlib import summary

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def mpirun(n):
    """mpirun for n ranks, one core each while there are cores, then sharing them (as lorabench plan assumes)."""
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "core" if n <= os.cpu_count() else "core:overload-allowed",
           "-n", str(n)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd


def run(cmd, log):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.exit(f"plan_validate: {' '.join(cmd)} failed (exit {p.returncode}); see {log}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="small,qwen2.5-0.5b")
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=os.path.join(ROOT, "outputs", "plan-validate-" + time.strftime("%Y%m%d-%H%M%S")))
    ap.add_argument("--bin", default=os.path.join(os.environ.get("LORABENCH_BUILD_DIR", os.path.join(ROOT, "build")),
                                                  "src", "app", "lorabench"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    worlds = [int(w) for w in a.worlds.split(",")]
    ini = os.path.join(ROOT, "inputs", "bench.ini")
    env_sets = ["--set", "run.quiet=true", "--set", "run.predict=true", "--set", "profile.peak_gflops=100"]
    rows = []
    for preset in a.presets.split(","):
        run([a.bin, "plan", ini, "--set", f"model.preset={preset}", "-n", a.worlds, "-o",
             os.path.join(a.out, f"plan-{preset}.md")], os.path.join(a.out, f"plan-{preset}.log"))
        for world in worlds:
            for strategy in (["single"] if world == 1 else ["ddp", "zero1", "zero2", "fsdp"]):
                name = f"{preset}-{strategy}-n{world}"
                cmd = mpirun(world) + [a.bin, ini, "--set", f"model.preset={preset}", "--set",
                                       f"parallel.strategy={strategy}", "--set", f"run.steps={a.steps}", "--set",
                                       "run.warmup_steps=1", "--set", f"run.output_dir={a.out}", "--set",
                                       f"run.name={name}"]
                run(cmd + env_sets, os.path.join(a.out, name + ".log"))
                s = summary(os.path.join(a.out, name, "run.h5"))
                rows.append(dict(preset=preset, strategy=strategy, world=world,
                                 mem_pred=s["predicted_tensor_peak_bytes"], mem=s["mem_peak_bytes_max"],
                                 step_pred=s["predicted_step_time_s"], step=s["step_time_mean_s"]))
                r = rows[-1]
                print(f"{name}: memory {r['mem_pred'] / r['mem']:.3f}, step {r['step_pred'] / r['step']:.3f}",
                      flush=True)
    mib = 1 << 20
    lines = ["| model | strategy | ranks | tensor peak / rank predicted (MiB) | measured (MiB) | ratio | "
             "step predicted (s) | measured (s) | ratio |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    mem_ok = step_ok = 0
    for r in rows:
        mr, sr = r["mem_pred"] / r["mem"], r["step_pred"] / r["step"]
        mem_ok += abs(mr - 1) <= 0.10
        step_ok += abs(sr - 1) <= 0.25
        lines.append(f"| {r['preset']} | {r['strategy']} | {r['world']} | {r['mem_pred'] / mib:.1f} | "
                     f"{r['mem'] / mib:.1f} | {mr:.3f} | {r['step_pred']:.3f} | {r['step']:.3f} | {sr:.3f} |")
    lines.append("")
    lines.append(f"memory within 10%: {mem_ok}/{len(rows)}; step time within 25%: {step_ok}/{len(rows)}")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "validation.md"), "w") as f:
        f.write(table)
    print(table)
    print(f"files: {a.out}")
    return 0 if mem_ok == step_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
