#!/usr/bin/env python3
"""The planner against measurement: every (model, strategy, world size) runs with its prediction recorded at
start, and the per-rank tensor peak and step time are compared (docs/plan.md; its evidence files feed docs/results.md).

    bench/plan_validate.py [--presets small,qwen2.5-0.5b] [--worlds 1,2,4] [--strategies ddp,zero1,zero2,fsdp]
                           [--steps 6] [--repeats 3] [--out DIR]

--strategies lists those of world sizes above 1; `tpT+S` is parallel.tp = T with parallel.strategy = S (S = single
where T is the world size, ddp across the groups otherwise), as `lorabench plan` names them.

Per preset: `lorabench plan -n 1,2,4` for the record (plan-<preset>.md), then each run of inputs/bench.ini's
workload (bf16, seq 256, micro-batch 1, LoRA r16 on all seven projections, one thread per rank) with
run.predict on: rank 0 probes right before the run starts (the bandwidth measured on the run's ranks), so
prediction and measurement see the machine in the same state; on a shared VM whose speed drifts by tens of
percent over minutes, a prediction made minutes earlier would measure the drift. Predicted:
/metrics/summary predicted_tensor_peak_bytes and predicted_step_time_s; measured: mem_peak_bytes_max (max
over ranks of the step's tensor peak) and step_time_median_s (median over the measured steps of the slowest
rank's step).

--repeats R runs every configuration R times, in R rounds over all configurations (so a drift of the
machine over minutes falls on every configuration alike, not on the ones run last), and compares the median
of the R predictions with the median of the R measurements. The single runs' ratios and the spread of the
measured step between rounds are printed beside them: on a VM whose speed moves by tens of percent between
runs, one run's ratio measures the machine as much as the planner. Targets: memory within 10%, step time
within 25% (of the medians). Prints a Markdown table and the pass counts; exits 1 on a miss.

--evidence DIR also writes the result as an evidence file (bench/evidence.py: the command, commit, machine,
host noise, every run file's sha256 with the summary attributes compared, the table's figures), from which
scripts/results-doc.py writes docs/results.md; a run that misses a target is evidence too.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import evidence
from benchlib import QUIET_CV, host_noise, torch_python

MEM_TOL, STEP_TOL = 0.10, 0.25  # the targets: |predicted / measured - 1| within these
# The /metrics/summary attributes an evidence file keeps of each run (54 runs' full summaries would make it
# large): what is compared, and what names the run.
EVIDENCE_KEYS = ("predicted_tensor_peak_bytes", "mem_peak_bytes_max", "predicted_step_time_s", "step_time_median_s",
                 "strategy", "world_size", "dtype", "seq_len", "micro_batch", "measured_steps", "loss_first")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def mpirun(n):
    """mpirun for n ranks, one core each while there are cores, then sharing them (as lorabench plan assumes)."""
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "core" if n <= os.cpu_count() else "core:overload-allowed",
           "-n", str(n)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd


def torch_version():
    """The venv's torch (host_noise runs there), for the evidence's machine description."""
    p = subprocess.run([torch_python(), "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                       text=True)
    return p.stdout.strip() or None


def run(cmd, log):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.exit(f"plan_validate: {' '.join(cmd)} failed (exit {p.returncode}); see {log}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="small,qwen2.5-0.5b")
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--strategies", default="ddp,zero1,zero2,fsdp",
                    help="those of world sizes above 1 (default ddp,zero1,zero2,fsdp; tpT+S: tensor parallelism)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each configuration, in rounds (default 3)")
    ap.add_argument("--noise-seconds", type=float, default=10,
                    help="how long bench/host_noise.py measures the machine's quiet before and after (default 10)")
    ap.add_argument("--out", default=os.path.join(ROOT, "outputs", "plan-validate-" + time.strftime("%Y%m%d-%H%M%S")))
    ap.add_argument("--evidence", default=None, metavar="DIR",
                    help="also write an evidence file, DIR/<machine family>/<UTC date>-<commit>-plan-validate.json")
    ap.add_argument("--bin", default=os.path.join(os.environ.get("LORABENCH_BUILD_DIR", os.path.join(ROOT, "build")),
                                                  "src", "app", "lorabench"))
    a = ap.parse_args()
    started = evidence.utc_now()
    os.makedirs(a.out, exist_ok=True)
    if a.evidence:
        os.makedirs(a.evidence, exist_ok=True)  # an unwritable DIR fails now, not after the runs
    worlds = [int(w) for w in a.worlds.split(",")]
    ini = os.path.join(ROOT, "inputs", "bench.ini")
    env_sets = ["--set", "run.quiet=true", "--set", "run.predict=true", "--set", "profile.peak_gflops=100"]
    def applies(strategy, world):  # tpT+single: one group of all the ranks; tpT+S: T divides them
        if not strategy.startswith("tp"):
            return True
        tp, inner = int(strategy[2:].split("+")[0]), strategy.split("+", 1)[1]
        return world % tp == 0 and (inner == "single") == (world == tp)

    def strategy_sets(strategy):
        if strategy.startswith("tp"):
            tp, inner = strategy[2:].split("+", 1)
            return ["--set", f"parallel.strategy={inner}", "--set", f"parallel.tp={int(tp)}"]
        return ["--set", f"parallel.strategy={strategy}"]

    configs = [(preset, strategy, world) for preset in a.presets.split(",") for world in worlds
               for strategy in (["single"] if world == 1 else a.strategies.split(",")) if applies(strategy, world)]
    for preset in a.presets.split(","):
        run([a.bin, "plan", ini, "--set", f"model.preset={preset}", "-n", a.worlds, "--strategy",
             ",".join(["single"] + a.strategies.split(",")), "-o", os.path.join(a.out, f"plan-{preset}.md")],
            os.path.join(a.out, f"plan-{preset}.log"))
    noise_before = host_noise(a.noise_seconds)
    print(f"host noise before: {noise_before['line']}", flush=True)
    runs = {c: [] for c in configs}
    for rep in range(1, a.repeats + 1):
        for preset, strategy, world in configs:
            name = f"{preset}-{strategy}-n{world}-r{rep}"
            cmd = mpirun(world) + [a.bin, ini, "--set", f"model.preset={preset}", *strategy_sets(strategy),
                                   "--set", f"run.steps={a.steps}", "--set",
                                   "run.warmup_steps=1", "--set", f"run.output_dir={a.out}", "--set",
                                   f"run.name={name}"]
            run(cmd + env_sets, os.path.join(a.out, name + ".log"))
            record = evidence.run_file_record(os.path.join(a.out, name, "run.h5"), EVIDENCE_KEYS)
            s = record["summary"]
            r = dict(mem_pred=s["predicted_tensor_peak_bytes"], mem=s["mem_peak_bytes_max"],
                     step_pred=s["predicted_step_time_s"], step=s["step_time_median_s"], run=name, run_file=record)
            runs[(preset, strategy, world)].append(r)
            print(f"round {rep}, {name}: memory {r['mem_pred'] / r['mem']:.3f}, step {r['step_pred'] / r['step']:.3f} "
                  f"({r['step_pred']:.3f} s predicted, {r['step']:.3f} s measured)", flush=True)
    rows = []
    for (preset, strategy, world), rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("mem_pred", "mem", "step_pred", "step")}
        rows.append(dict(preset=preset, strategy=strategy, world=world, **med, mem_ratio=med["mem_pred"] / med["mem"],
                         step_ratio=med["step_pred"] / med["step"], single=[r["step_pred"] / r["step"] for r in rs],
                         spread=max(r["step"] for r in rs) / min(r["step"] for r in rs)))
    mib = 1 << 20
    noise_after = host_noise(a.noise_seconds)
    lines = [f"Medians of {a.repeats} runs per configuration.", "",
             "Host noise (bench/host_noise.py: one bf16 GEMM timed in short windows, one thread): before "
             f"{noise_before['line']}; after {noise_after['line']}.", "",
             "| model | strategy | ranks | tensor peak / rank predicted (MiB) | measured (MiB) | ratio | "
             "step predicted (s) | measured (s) | ratio | single runs' ratios | measured max / min |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['preset']} | {r['strategy']} | {r['world']} | {r['mem_pred'] / mib:.1f} | "
                     f"{r['mem'] / mib:.1f} | {r['mem_ratio']:.3f} | {r['step_pred']:.3f} | {r['step']:.3f} | "
                     f"{r['step_ratio']:.3f} | {' / '.join(f'{x:.2f}' for x in r['single'])} | {r['spread']:.2f} |")
    lines.append("")
    passed = dict(memory=sum(abs(r["mem_ratio"] - 1) <= MEM_TOL for r in rows),
                  step=sum(abs(r["step_ratio"] - 1) <= STEP_TOL for r in rows), configurations=len(rows),
                  single=sum(abs(x - 1) <= STEP_TOL for r in rows for x in r["single"]),
                  single_runs=sum(len(r["single"]) for r in rows))
    mem_ok, step_ok = passed["memory"], passed["step"]
    lines.append(f"memory within {100 * MEM_TOL:.0f}%: {mem_ok}/{len(rows)}; step time within {100 * STEP_TOL:.0f}%: "
                 f"{step_ok}/{len(rows)} (single runs: {passed['single']}/{passed['single_runs']})")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "validation.md"), "w") as f:
        f.write(table)
    print(table)
    print(f"files: {a.out}")
    if a.evidence:
        machine = evidence.machine_description(a.bin, versions={"torch": torch_version()})
        settings = dict(presets=a.presets.split(","), worlds=worlds, strategies=a.strategies.split(","), steps=a.steps,
                        warmup=1, repeats=a.repeats,
                        memory_tolerance=MEM_TOL, step_tolerance=STEP_TOL, out=os.path.abspath(a.out), bin=a.bin)
        body = {"settings": settings, "table": {"rows": rows, "passed": passed},
                "runs": [{"preset": p, "strategy": st, "world": w,  # the figures compared are in each summary
                          "rounds": [{"run": r["run"], "run_file": r["run_file"]} for r in rs]}
                         for (p, st, w), rs in runs.items()]}
        noise = {"before": noise_before, "after": noise_after, "quiet_cv": QUIET_CV}
        print("evidence: " + evidence.write(a.evidence, "plan-validate", "The planner against measurement (bench/"
                                            "plan_validate.py)", started, machine, noise, body, "plan-validate"))
    return 0 if mem_ok == step_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
