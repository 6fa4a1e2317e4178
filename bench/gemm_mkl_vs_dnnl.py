#!/usr/bin/env python3
"""fp32 GEMM on the 0.5B model's shapes, one thread, best of 7: libtorch's at::mm (MKL inside the official
libtorch_cpu.so) against Debian oneDNN's dnnl_sgemm (what lorabench's LORABENCH_WITH_DNNL path calls),
both in this one process. Checks each result against the other before timing counts.

    OMP_NUM_THREADS=1 $(scripts/torch-venv.sh)/bin/python bench/gemm_mkl_vs_dnnl.py   (docs/results.md)
"""
import ctypes
import ctypes.util
import sys
import time

import torch

SHAPES = [(256, 896, 896), (256, 896, 4864), (256, 4864, 896), (256, 896, 8192), (896, 256, 4864)]


def best(fn, reps=7):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    torch.set_num_threads(1)
    name = ctypes.util.find_library("dnnl")
    if name is None:
        sys.exit("gemm_mkl_vs_dnnl: no libdnnl (Debian's libdnnl-dev, scripts/install-deps.sh)")
    sgemm = ctypes.CDLL(name).dnnl_sgemm
    i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    sgemm.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, f32, ptr, i64, ptr, i64, f32, ptr, i64]
    print(f"torch {torch.__version__}, {name}")
    print("| M x K x N | at::mm (MKL) GFLOP/s | dnnl_sgemm GFLOP/s |")
    print("| --- | --- | --- |")
    total_mm = total_dnnl = 0.0
    for M, K, N in SHAPES:
        a, b, c = torch.randn(M, K), torch.randn(K, N), torch.empty(M, N)
        t_mm = best(lambda: torch.mm(a, b, out=c))
        # dnnl_sgemm is row-major: C (M x N) = A (M x K) B (K x N).
        t_dnnl = best(lambda: sgemm(b"N", b"N", M, N, K, 1.0, a.data_ptr(), K, b.data_ptr(), N, 0.0, c.data_ptr(), N))
        if not torch.allclose(c, a @ b, rtol=1e-4, atol=1e-3):
            sys.exit(f"gemm_mkl_vs_dnnl: dnnl_sgemm and at::mm disagree on {M}x{K}x{N}")
        flop = 2.0 * M * K * N
        total_mm += t_mm
        total_dnnl += t_dnnl
        print(f"| {M}x{K}x{N} | {flop / t_mm / 1e9:.0f} | {flop / t_dnnl / 1e9:.0f} |")
    print(f"all shapes: at::mm {total_mm * 1e3:.1f} ms, dnnl_sgemm {total_dnnl * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
