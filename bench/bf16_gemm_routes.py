#!/usr/bin/env python3
"""How a bf16 GEMM runs on this CPU, three ways, on the shapes of a Qwen2.5-0.5B step (256 tokens):

  libtorch bf16    torch.mm on bf16 tensors: oneDNN where the CPU has AVX-512 (F, BW, VL, DQ), libtorch's
                   reference loops elsewhere; what transformers + peft run in bf16 on a CPU
  widened to fp32  both inputs widened to fp32, an fp32 GEMM, the result rounded to bf16 (widening and
                   rounding timed)
  widened in blocks  the same, b widened a block at a time so that the widened block is still in cache when
                   the GEMM reads it, by the rule of src/model/gemm.cpp (mm_widened): what lorabench runs on a
                   CPU without AVX-512
  fp32 alone       the fp32 GEMM of the same values with no conversions (the frame's rate there, bench/frame.py)

One thread on the first allowed core, each shape timed in interleaved samples of >= --min-sample-s, best
of --rounds. Prints a Markdown table (ms per GEMM and GFLOP/s) and whether this CPU has AVX-512
(benchlib.cpu_bf16_gemm_native). docs/performance.md, "bf16 on CPUs without AVX-512", explains it.

    python bench/bf16_gemm_routes.py [--rounds 3] [--min-sample-s 0.2]
"""
import argparse

import torch

from benchlib import best_times, cpu_bf16_gemm_native, pin_to_first_core

def widened_in_blocks(a, b):
    """src/model/gemm.cpp's mm_widened, rounded to bf16: blocks of a wide transposed b's columns (N >= 4K),
    blocks of a tall row-major b's rows accumulated in fp32 (K >= 4N), else b widened whole."""
    (m, k), n = a.shape, b.shape[1]
    a32 = a.float()
    if b.stride(0) == 1 and n >= 4 * k:
        rows = max(256, (1 << 18) // k)
        out = torch.empty(m, n)
        for j in range(0, n, rows):
            torch.mm(a32, b[:, j:j + rows].float(), out=out[:, j:j + rows])
        return out.to(torch.bfloat16)
    if b.stride(1) == 1 and k >= 4 * n:
        rows = max(256, (1 << 19) // n)
        out = torch.zeros(m, n)
        for i in range(0, k, rows):
            out.addmm_(a32[:, i:i + rows], b[i:i + rows].float())
        return out.to(torch.bfloat16)
    return torch.mm(a32, b.float()).to(torch.bfloat16)


# (name, M, K, N, b transposed): the forward x @ W^T of the packed q|k|v, gate|up and down projections, the
# down projection's input gradient dY @ W, and one 16384-column chunk of the head: its logits h @ E_c^T and
# their accumulation p @ E_c.
SHAPES = [("q|k|v fwd", 256, 896, 1152, True), ("gate|up fwd", 256, 896, 9728, True),
          ("down fwd", 256, 4864, 896, True), ("down dgrad", 256, 896, 4864, False),
          ("head chunk logits", 256, 896, 16384, True), ("head chunk accumulate", 256, 16384, 896, False)]


def routes(a, b):
    a32, b32 = a.float(), b.float()
    return {"libtorch bf16": lambda: torch.mm(a, b),
            "widened to fp32": lambda: torch.mm(a.float(), b.float()).to(torch.bfloat16),
            "widened in blocks": lambda: widened_in_blocks(a, b),
            "fp32 alone": lambda: torch.mm(a32, b32)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-sample-s", type=float, default=0.2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    pin_to_first_core()
    torch.manual_seed(0)
    cases = []
    for name, m, k, n, trans in SHAPES:
        a = torch.randn(m, k).to(torch.bfloat16)
        b = torch.randn(n, k).to(torch.bfloat16)
        b = b.t() if trans else b.view(k, n)
        cases += [{"shape": name, "route": route, "fn": fn} for route, fn in routes(a, b).items()]
    for c, best in zip(cases, best_times([c["fn"] for c in cases], args.rounds, args.min_sample_s)):
        c["best"] = best
    native = cpu_bf16_gemm_native()
    print(f"CPU: {'AVX-512 (oneDNN bf16 GEMMs)' if native else 'no AVX-512 (libtorch bf16 GEMMs: reference loops)'}, "
          f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, 1 thread, best of {args.rounds}")
    names = list(routes(torch.zeros(1, 1), torch.zeros(1, 1)))
    print("\n| shape (M x K x N) | " + " | ".join(f"{r} ms (GFLOP/s)" for r in names) + " | libtorch bf16 / in blocks |")
    print("| --- " * (len(names) + 2) + "|")
    for name, m, k, n, _ in SHAPES:
        row = {c["route"]: c["best"] for c in cases if c["shape"] == name}
        cells = [f"{1e3 * row[r]:.2f} ({2e-9 * m * k * n / row[r]:.1f})" for r in names]
        print(f"| {name} ({m} x {k} x {n}) | " + " | ".join(cells)
              + f" | {row['libtorch bf16'] / row['widened in blocks']:.1f}x |")


if __name__ == "__main__":
    main()
