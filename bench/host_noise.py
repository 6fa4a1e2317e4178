#!/usr/bin/env python3
"""Is this machine quiet enough to compare timings? One bf16 GEMM of a decoder layer's gate|up shape
(256 x 896 x 9728, Qwen2.5-0.5B at seq 256; on a CPU without AVX-512, where libtorch's bf16 GEMM is its
reference loops, the fp32 GEMM that lorabench runs there on bf16 values: benchlib.cpu_bf16_gemm_native),
one thread on the first allowed core, timed over and over in
short windows for a few seconds: its median rate, range and coefficient of variation (CV). On a GPU the
GEMM has the GPU table's 16384 rows (seq 2048 x micro-batch 8): at 256 rows one GEMM takes microseconds
and the loop would time kernel launches, not the device.

On a quiet machine the CV is about 1% (a dedicated core, nothing else on it). On a shared VM whose host
runs other tenants, the same loop moves by tens of percent, and so does every step time, frame and
prediction measured on it: docs/performance.md, "Is the machine quiet?". bench/run_bench.py and
bench/plan_validate.py record this figure before and after their runs, so that every table says whether
it was taken on a quiet machine.

    python bench/host_noise.py [--seconds 10] [--window-s 0.05] [--device cpu|cuda]

Prints one JSON line: median_gflops, min_gflops, max_gflops, cv, windows, seconds, window_s, device, mkn,
gemm.
benchlib.host_noise runs it and calls a CV above 5% not quiet.
"""
import argparse
import json
import statistics
import time

import torch

from benchlib import cpu_gemm_dtype, pin_to_first_core


def measure(seconds, window_s, device="cpu", m=256, k=896, n=9728):
    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    gemm = torch.bfloat16 if dev.type == "cuda" else cpu_gemm_dtype(torch)
    a = torch.randn(m, k, device=dev).to(torch.bfloat16).to(gemm)
    b = torch.randn(n, k, device=dev).to(torch.bfloat16).to(gemm).t()
    c = torch.empty(m, n, device=dev, dtype=gemm)
    for _ in range(3):
        torch.mm(a, b, out=c)  # kernel selection, first touch
    sync()
    flops = 2.0 * m * k * n
    rates = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        reps = 0
        while True:
            torch.mm(a, b, out=c)
            reps += 1
            if dev.type == "cuda" and reps % 16:
                continue
            sync()
            if time.perf_counter() - t0 >= window_s:
                break
        rates.append(flops * reps / (time.perf_counter() - t0) / 1e9)
    mean = statistics.fmean(rates)
    return {"median_gflops": statistics.median(rates), "min_gflops": min(rates), "max_gflops": max(rates),
            "cv": statistics.pstdev(rates) / mean if mean > 0 else float("nan"), "windows": len(rates),
            "seconds": seconds, "window_s": window_s, "device": device, "mkn": [m, k, n],
            "gemm": "bf16" if gemm == torch.bfloat16 else "fp32 on bf16 values, no AVX-512"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--window-s", type=float, default=0.05)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()
    if args.seconds <= 0 or args.window_s <= 0:
        raise SystemExit("host_noise: --seconds and --window-s must be > 0")
    torch.set_num_threads(1)
    if args.device == "cpu":
        pin_to_first_core()
    rows = 16384 if args.device == "cuda" else 256
    print(json.dumps(measure(args.seconds, args.window_s, args.device, m=rows)), flush=True)


if __name__ == "__main__":
    main()
