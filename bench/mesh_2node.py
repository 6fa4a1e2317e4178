#!/usr/bin/env python3
"""HSDP and tensor parallelism x DDP against FSDP across two nodes whose link is as slow as a real network is per
core (issue 47, item 4; docs/strategies.md, "HSDP" and "Tensor parallelism").

Brings up the two-node Slurm cluster of docs/multinode.md on this machine (scripts/slurm/slurm_up_2node.sh:
network namespaces lbnode0 and lbnode1 joined by a veth pair, lbnet), limits the link in both directions
with a token bucket (tc qdisc tbf on each end of lbnet), and runs `srun -N 2 -n 4 lorabench inputs/fsdp.ini`
(2 ranks per node) with each strategy and model, in alternating rounds. A strategy written `tpT+S` runs S across
tensor-parallel groups of T ranks (`parallel.tp = T`, each group inside a node): `tp2+ddp` is TP 2 x DP 2. Per run: the step time and tokens/s
of the run file, the bytes the step's collectives handed to the communicator (`comm_bytes`, and for hsdp per
mesh dimension), and the bytes that crossed the link (lbnet's counters on lbnode1, received plus sent, over
the whole run, divided by the steps run: start-up and the end's gathers of the LoRA state are included).

Why --rate 1.5gbit by default: a CPU node of an HPC cluster has one 100-200 Gbit/s link (HDR/NDR
InfiniBand, 200 GbE) for 64-128 cores, 1.5-3 Gbit/s per core. The namespace nodes here run 2 ranks of one
thread each on a machine whose 2 cores serve both nodes, i.e. one core per node: 1.5 Gbit/s per node keeps
the ratio of compute to network of such a cluster. Unlimited, the veth link moves several GB/s through
memory, faster than any network per core, and the comparison would measure nothing.

    sudo bench/mesh_2node.py [--presets qwen2.5-0.5b,qwen2.5-1.5b] [--rate 1.5gbit] [--steps 4] \\
                             [--repeats 1] [--evidence results]

Needs what tests/multinode needs (root, network namespaces, veth, slurm-wlm, munge, iproute2) and a built
tree (LORABENCH_BUILD_DIR, default build/).
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

import evidence
from benchlib import QUIET_CV, host_noise

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SLURM = os.path.join(ROOT, "scripts", "slurm")
EVIDENCE_KEYS = ["strategy", "world_size", "model", "dtype", "step_time_median_s", "step_time_mean_s",
                 "tokens_per_s_mean", "mem_peak_bytes_max", "rss_peak_bytes_max", "measured_steps", "mesh",
                 "comm_bytes_per_step_dp_shard", "comm_bytes_per_step_dp_replicate", "comm_bytes_per_step_tp",
                 "loss_first", "loss_last"]


def strategy_sets(strategy):
    """The --set overrides of a strategy name: "fsdp", or "tp2+ddp" (parallel.tp = 2, parallel.strategy = ddp, and
    train.grad_accum = 2: the T ranks of a group read one micro-batch, so T micro-steps keep the global batch of the
    other rows, 4 sequences per step, and their step times compare)."""
    if strategy.startswith("tp") and "+" in strategy:
        tp, inner = strategy[2:].split("+", 1)
        return ["--set", f"parallel.strategy={inner}", "--set", f"parallel.tp={int(tp)}", "--set",
                f"train.grad_accum={int(tp)}"]
    return ["--set", f"parallel.strategy={strategy}"]


def sh(cmd, log=None, check=True):
    with open(log, "w") if log else open(os.devnull, "w") as out:
        p = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
    if check and p.returncode != 0:
        if log:
            sys.stderr.write(open(log).read()[-4000:])
        raise SystemExit(f"mesh_2node: {' '.join(cmd[:6])}... failed ({p.returncode})")
    return p.returncode


def on(cluster, node, *cmd):
    return [os.path.join(SLURM, "slurm_2node.sh"), cluster, "exec", node, *cmd]


def link_bytes(cluster):
    """lbnet's received + sent bytes on lbnode1 (/proc/net/dev inside its namespace)."""
    out = subprocess.run(on(cluster, "lbnode1", "cat", "/proc/net/dev"), stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    for line in out.splitlines():
        if line.strip().startswith("lbnet:"):
            f = line.split(":", 1)[1].split()
            return int(f[0]) + int(f[8])
    raise SystemExit("mesh_2node: lbnet not found on lbnode1")


def interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="qwen2.5-0.5b,qwen2.5-1.5b")
    ap.add_argument("--strategies", default="fsdp,hsdp,tp2+ddp")
    ap.add_argument("--rate", default="1.5gbit", help="tc tbf rate of each direction of the link (default 1.5gbit)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--sets", default="", help="extra --set overrides, comma-separated (e.g. data.seq_len=128)")
    ap.add_argument("--out", default=os.path.join(ROOT, "outputs", "mesh-2node-" + time.strftime("%Y%m%d-%H%M%S")))
    ap.add_argument("--noise-seconds", type=float, default=10,
                    help="how long bench/host_noise.py measures the machine's quiet before and after (default 10)")
    ap.add_argument("--evidence", default=None, metavar="DIR")
    ap.add_argument("--bin", default=os.path.join(os.environ.get("LORABENCH_BUILD_DIR", os.path.join(ROOT, "build")),
                                                  "src", "app", "lorabench"))
    a = ap.parse_args()
    started = evidence.utc_now()
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    cluster = os.path.join(out, "cluster")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_MCA_btl_tcp_if_include="lbnet", OMPI_MCA_oob_tcp_if_include="lbnet")
    os.environ.update(env)
    noise_before = host_noise(a.noise_seconds)
    print(f"host noise before: {noise_before['line']}", flush=True)
    # A SIGTERM (a killed benchmark) takes the cluster down too, as an interrupt does.
    signal.signal(signal.SIGTERM, interrupted)
    sh([os.path.join(SLURM, "slurm_up_2node.sh"), cluster], os.path.join(out, "slurm_up.txt"))
    runs = {}
    try:
        for node in ("lbnode0", "lbnode1"):
            sh(on(cluster, node, "tc", "qdisc", "add", "dev", "lbnet", "root", "tbf", "rate", a.rate, "burst", "1mbit",
                  "latency", "100ms"), os.path.join(out, f"tc-{node}.txt"))
        qdisc = subprocess.run(on(cluster, "lbnode1", "tc", "qdisc", "show", "dev", "lbnet"), stdout=subprocess.PIPE,
                               text=True).stdout.strip()
        print(f"link: {qdisc}", flush=True)
        extra = [x for s in a.sets.split(",") if s for x in ("--set", s)]
        configs = [(p, s) for p in a.presets.split(",") for s in a.strategies.split(",")]
        for rep in range(1, a.repeats + 1):
            for preset, strategy in configs:
                name = f"{preset}-{strategy}-r{rep}"
                cmd = on(cluster, "lbnode0", "srun", "-N", "2", "-n", "4", "--time=60", a.bin,
                         os.path.join(ROOT, "inputs", "fsdp.ini"), "--set", f"model.preset={preset}",
                         *strategy_sets(strategy), "--set", f"run.steps={a.steps}", "--set", "run.warmup_steps=1",
                         "--set", "run.predict=false", "--set", "run.quiet=true", "--set", f"run.output_dir={out}",
                         "--set", f"run.name={name}", "--set", "checkpoint.save_adapter=false", *extra)
                b0, t0 = link_bytes(cluster), time.time()
                sh(cmd, os.path.join(out, name + ".log"))
                b1, wall = link_bytes(cluster), time.time() - t0
                record = evidence.run_file_record(os.path.join(out, name, "run.h5"), EVIDENCE_KEYS)
                s = record["summary"]
                r = dict(run=name, step=s["step_time_median_s"], tps=s["tokens_per_s_mean"], link_bytes=b1 - b0,
                         link_per_step=(b1 - b0) / a.steps, wall=wall, mem=s["mem_peak_bytes_max"],
                         replicate=s.get("comm_bytes_per_step_dp_replicate"), shard=s.get("comm_bytes_per_step_dp_shard"),
                         tp=s.get("comm_bytes_per_step_tp"), loss_first=s.get("loss_first"),
                         run_file=record)
                runs.setdefault((preset, strategy), []).append(r)
                print(f"round {rep}, {name}: step {r['step']:.2f} s, {r['tps']:.1f} tokens/s, "
                      f"{r['link_per_step'] / 2**20:.1f} MiB over the link per step ({wall:.0f} s)", flush=True)
    finally:
        sh([os.path.join(SLURM, "slurm_down_2node.sh"), cluster], os.path.join(out, "slurm_down.txt"), check=False)
    noise_after = host_noise(a.noise_seconds)
    rows = []
    for (preset, strategy), rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("step", "tps", "link_per_step", "mem")}
        # What stays inside a node (tensor parallelism's all-reduces), and the step-0 loss, which every strategy of
        # a model must share (the same weights and tokens).
        tp = [r["tp"] for r in rs if r.get("tp") is not None]
        rows.append(dict(preset=preset, strategy=strategy, **med, runs=len(rs), tp_per_step=statistics.median(tp) if tp else None,
                         loss_first=rs[0].get("loss_first")))
    for r in rows:
        ref = next((x for x in rows if x["preset"] == r["preset"] and x["strategy"] == "fsdp"), None)
        r["speedup_vs_fsdp"] = ref["step"] / r["step"] if ref else None
        r["link_vs_fsdp"] = r["link_per_step"] / ref["link_per_step"] if ref and ref["link_per_step"] else None
    lines = [f"2 nodes x 2 ranks, link {a.rate} each way (tc tbf), {a.steps} steps (1 warm-up), medians of "
             f"{a.repeats} run(s); host noise before {noise_before['line']}, after {noise_after['line']}", "",
             "| model | strategy | step (s) | tokens/s | MiB over the link / step | MiB in the tp group / step | "
             "peak tensor MiB / rank | step vs fsdp | link bytes vs fsdp | step-0 loss |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        tpm = f"{r['tp_per_step'] / 2**20:.1f}" if r["tp_per_step"] is not None else "-"
        lines.append(f"| {r['preset']} | {r['strategy']} | {r['step']:.3f} | {r['tps']:.1f} | "
                     f"{r['link_per_step'] / 2**20:.1f} | {tpm} | {r['mem'] / 2**20:.0f} | "
                     f"{r['speedup_vs_fsdp']:.2f}x | {r['link_vs_fsdp']:.3f} | {r['loss_first']:.6f} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out, "mesh.md"), "w") as f:
        f.write(table)
    print(table)
    if a.evidence:
        machine = evidence.machine_description(a.bin)
        settings = dict(presets=a.presets.split(","), strategies=a.strategies.split(","), rate=a.rate, steps=a.steps,
                        warmup=1, repeats=a.repeats, sets=a.sets, ranks="2 nodes x 2", out=out, link=qdisc)
        body = {"settings": settings, "table": {"rows": rows},
                "runs": [{"preset": p, "strategy": st, "rounds": rs} for (p, st), rs in runs.items()]}
        noise = {"before": noise_before, "after": noise_after, "quiet_cv": QUIET_CV}
        print("evidence: " + evidence.write(a.evidence, "mesh", "HSDP and TP x DP against FSDP across two nodes on a slow link "
                                            "(bench/mesh_2node.py)", started, machine, noise, body, "mesh"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
