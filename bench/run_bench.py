#!/usr/bin/env python3
"""lorabench against the PyTorch-eager peer (bench/peer_torch.py), same workloads, same machine, same
thread count, run back to back and alternating. Prints a Markdown table of median step time, tokens/s,
their ratio, LoRA-MFU and peak RSS, and the machine's facts (CPU, ISA, libtorch kernels, BLAS).
Refuses to report when the reference BLAS is loaded (fp32 numbers would be meaningless).

    scripts/bench.sh [--rounds N] [--steps N] [--only NAME ...]   (see docs/performance.md)
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import mpirun, summary

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name, preset, precision, ranks, lorabench strategy (the peer runs DDP when ranks > 1; it has no FSDP)
WORKLOADS = [
    ("0.5b-bf16", "qwen2.5-0.5b", "bf16", 1, "single"),
    ("0.5b-fp32", "qwen2.5-0.5b", "fp32", 1, "single"),
    ("small-bf16", "small", "bf16", 1, "single"),
    ("0.5b-bf16-ddp2", "qwen2.5-0.5b", "bf16", 2, "ddp"),
    ("0.5b-bf16-fsdp2", "qwen2.5-0.5b", "bf16", 2, "fsdp"),
]


def measure_isolated(cmd, env):
    """Runs cmd from a fresh python child and returns (stdout, stderr, peak RSS in MiB): ru_maxrss of a
    process's children is the maximum over every descendant it waited for, and only grows, so each
    measured command gets its own helper process."""
    helper = [sys.executable, "-c",
              "import json,resource,subprocess,sys;"
              "p=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE,text=True);"
              "print(json.dumps({'rc':p.returncode,'out':p.stdout,'err':p.stderr,"
              "'rss':resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024.0}))"] + cmd
    p = subprocess.run(helper, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"bench: helper failed ({p.returncode})")
    r = json.loads(p.stdout)
    if r["rc"] != 0:
        sys.stderr.write(r["out"] + r["err"])
        raise SystemExit(f"bench: command failed ({r['rc']}): {' '.join(cmd)}")
    return r["out"], r["err"], r["rss"]


def run_lorabench(args, w, out_dir, tag, env):
    name, preset, precision, ranks, strategy = w
    run = f"bench-{name}-{tag}"
    cmd = mpirun(ranks) + [args.lorabench, os.path.join(ROOT, "inputs", "bench.ini"),
                           "--set", f"run.output_dir={out_dir}", "--set", f"run.name={run}",
                           "--set", f"model.preset={preset}", "--set", f"model.dtype={precision}",
                           "--set", f"parallel.strategy={strategy}", "--set", f"run.steps={args.steps + args.warmup}",
                           "--set", f"run.warmup_steps={args.warmup}", "--set", "run.quiet=true"]
    _, _, rss = measure_isolated(cmd, env)
    f = os.path.join(out_dir, run, "run.h5")
    s = summary(f)
    med = s["step_time_median_s"]
    tokens = int(s["global_batch_size"]) * int(s["seq_len"])
    return {"step_s": med, "tokens_per_s": tokens / med, "rss_mib": rss, "mfu": s["mfu_mean"],
            "flops_per_step": s["flops_per_step"], "peak": s["peak_flops_per_rank"],
            "peak_detail": str(s["peak_flops_detail"]), "tensor_peak_mib": s["mem_peak_bytes_max"] / 2**20,
            "loss_last": s["loss_last"], "file": f}


def run_peer(args, w, env):
    name, preset, precision, ranks, strategy = w
    base = [sys.executable, args.peer, "--preset", preset, "--precision", precision, "--seq", "256",
            "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", "1"]
    if ranks == 1:
        out, _, rss = measure_isolated(base, env)
        return dict(json.loads(out.strip().splitlines()[-1]), rss_mib=rss)
    port = str(29500 + (os.getpid() % 400))
    # Both ranks from one helper so the RSS covers them (the larger of the two).
    script = ("import os,subprocess,sys;"
              "ps=[subprocess.Popen(sys.argv[1:],env=dict(os.environ,RANK=str(r)),stdout=subprocess.PIPE,text=True)"
              f" for r in range({ranks})];"
              "outs=[p.communicate()[0] for p in ps];"
              "sys.exit(max(p.returncode for p in ps)) if any(p.returncode for p in ps) else print(outs[0])")
    env2 = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE=str(ranks))
    out, _, rss = measure_isolated([sys.executable, "-c", script] + base, env2)
    return dict(json.loads(out.strip().splitlines()[-1]), rss_mib=rss)


def machine_facts(args, env):
    doc = subprocess.run([args.lorabench, "doctor", "--json"], env=env, stdout=subprocess.PIPE, text=True).stdout
    checks = {c["name"]: c for c in json.loads(doc)["checks"]}
    blas = checks["blas"]
    if blas["details"].get("kind") == "reference BLAS":
        raise SystemExit("bench: REFUSED: the reference BLAS is loaded (" + blas["message"] + ")")
    cpu = "unknown"
    flags = []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = [x for x in line.split(":", 1)[1].split() if x.startswith(("avx", "amx")) or x == "fma"]
    torch_cfg = subprocess.run([sys.executable, "-c", "import torch;print(torch.__config__.show())"],
                               env=env, stdout=subprocess.PIPE, text=True).stdout
    capability = [l.strip() for l in torch_cfg.splitlines() if "CPU capability" in l or "MKL-DNN" in l]
    return {"cpu": cpu, "cpus": os.cpu_count(), "isa": " ".join(flags), "blas": blas["message"],
            "torch_kernels": "; ".join(capability), "aten_cpu_capability": env.get("ATEN_CPU_CAPABILITY", "default")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lorabench", default=os.path.join(ROOT, "build", "src", "app", "lorabench"))
    ap.add_argument("--peer", default=os.path.join(ROOT, "bench", "peer_torch.py"))
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per workload")
    ap.add_argument("--steps", type=int, default=5, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="workload names")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    facts = machine_facts(args, env)
    out_dir = tempfile.mkdtemp(prefix="lorabench-bench-")
    results = {}
    for w in WORKLOADS:
        if args.only and w[0] not in args.only:
            continue
        ours, peers = [], []
        for r in range(args.rounds):
            # Alternate which goes first, so neither always runs on a warmer or quieter machine.
            order = ["ours", "peer"] if r % 2 == 0 else ["peer", "ours"]
            for who in order:
                t0 = time.time()
                if who == "ours":
                    ours.append(run_lorabench(args, w, out_dir, f"r{r}", env))
                elif w[4] in ("single", "ddp"):
                    peers.append(run_peer(args, w, env))
                print(f"  {w[0]} round {r} {who}: {time.time() - t0:.0f} s", file=sys.stderr)
        results[w[0]] = {"ours": ours, "peer": peers, "workload": w}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": facts, "results": results}, f, indent=1)

    med = statistics.median
    print(f"machine: {facts['cpu']}, {facts['cpus']} CPUs, ISA: {facts['isa']}")
    print(f"libtorch: {facts['torch_kernels']}; ATEN_CPU_CAPABILITY={facts['aten_cpu_capability']}")
    print(f"BLAS: {facts['blas']}")
    print(f"threads: 1 per rank; seq 256, micro-batch 1, LoRA r16 alpha 32 on q,k,v,o,gate,up,down; "
          f"{args.steps} measured steps after {args.warmup} warm-up, {args.rounds} alternating rounds, medians")
    print()
    print("| workload | lorabench step (s) | lorabench tokens/s | peer step (s) | peer tokens/s | speedup | "
          "LoRA-MFU lorabench | LoRA-MFU peer | peak RSS lorabench (MiB) | peak RSS peer (MiB) | RSS ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        o = r["ours"]
        s_o = med([x["step_s"] for x in o])
        t_o = med([x["tokens_per_s"] for x in o])
        rss_o = med([x["rss_mib"] for x in o])
        mfu_o = med([x["mfu"] for x in o])
        ranks = r["workload"][3]
        if r["peer"]:
            s_p = med([x["step_time_s"] for x in r["peer"]])
            t_p = med([x["tokens_per_s"] for x in r["peer"]])
            rss_p = med([x["rss_mib"] for x in r["peer"]])
            # The peer's MFU with lorabench's formula and lorabench's measured peak (same machine, dtype).
            mfu_p = o[0]["flops_per_step"] / s_p / (o[0]["peak"] * ranks)
            print(f"| {name} | {s_o:.3f} | {t_o:.1f} | {s_p:.3f} | {t_p:.1f} | {t_o / t_p:.2f}x | {100 * mfu_o:.1f}% | "
                  f"{100 * mfu_p:.1f}% | {rss_o:.0f} | {rss_p:.0f} | {rss_o / rss_p:.2f} |")
        else:
            print(f"| {name} | {s_o:.3f} | {t_o:.1f} | (no peer) | | | {100 * mfu_o:.1f}% | | {rss_o:.0f} | | |")
    print()
    print(f"peak FLOP/s per rank used for MFU: {results[next(iter(results))]['ours'][0]['peak_detail']}")
    print(f"run files: {out_dir}")


if __name__ == "__main__":
    main()
