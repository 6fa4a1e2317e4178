#!/usr/bin/env python3
"""What oneDNN's copies of a frozen weight cost in a bf16 GEMM on this CPU (one thread, Qwen2.5-0.5B shapes).

torch.mm / at::mm (what lorabench and transformers + peft run on a CPU) hands oneDNN a plain weight, and
oneDNN's matmul copies it into its own blocked layout (pairs along the reduction dimension) on every call:
in the forward x @ W^T the reduction runs over W's input dimension, in the input gradient dY @ W over its
output dimension, so the two directions need two different layouts. Each case here multiplies one token
block by --layers distinct weights in turn (so that, as in a step, the weights come from memory, not from
the caches) two ways:

  at::mm      the plain weight (what lorabench runs)
  prepacked   the weight reordered once into oneDNN's layout for that direction (torch.ops.mkldnn.
              _reorder_linear_weight, then _linear_pointwise): the copy left out of the timed GEMM

and checks that both give the same values (exit 1 otherwise). A frozen weight prepacked for both
directions is a second copy of it (the table's last column), since neither layout serves the other
direction and the embedding lookup reads the plain rows. docs/performance.md ("Where the time goes")
quotes it.

    python bench/prepacked_gemm.py [--layers 24] [--head-chunks 10] [--tokens 256] [--rounds 3] [--min-sample-s 0.2]
"""
import argparse
import sys

import torch

from benchlib import best_times, cpu_bf16_gemm_native, pin_to_first_core

# (name, output dim, input dim, head): the packed q|k|v, o, gate|up and down projections of a layer (--layers
# of each), and a 16384-row chunk of the tied embedding as the head's weight (--head-chunks of them; 10 cover
# the vocabulary).
SHAPES = [("q|k|v", 1152, 896, False), ("o", 896, 896, False), ("gate|up", 9728, 896, False),
          ("down", 896, 4864, False), ("head chunk", 16384, 896, True)]


def cases(tokens, layers, head_chunks):
    lin = torch.ops.mkldnn._linear_pointwise
    out = []
    for name, n_out, n_in, head in SHAPES:
        count = head_chunks if head else layers
        ws = [(torch.randn(n_out, n_in) / n_in ** 0.5).to(torch.bfloat16) for _ in range(count)]
        x = torch.randn(tokens, n_in).to(torch.bfloat16)
        dy = torch.randn(tokens, n_out).to(torch.bfloat16)
        fwd = [torch.ops.mkldnn._reorder_linear_weight(w, tokens) for w in ws]
        bwd = [torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), tokens) for w in ws]
        flops = 2.0 * tokens * n_in * n_out * count
        out.append({"shape": name, "dir": "forward x @ W^T", "flops": flops, "bytes": 2 * n_in * n_out * count,
                    "plain": lambda x=x, ws=ws: [x @ w.t() for w in ws],
                    "packed": lambda x=x, ps=fwd: [lin(x, p, None, "none", [None], "") for p in ps]})
        out.append({"shape": name, "dir": "input gradient dY @ W", "flops": flops, "bytes": 2 * n_in * n_out * count,
                    "plain": lambda dy=dy, ws=ws: [dy @ w for w in ws],
                    "packed": lambda dy=dy, ps=bwd: [lin(dy, p, None, "none", [None], "") for p in ps]})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--head-chunks", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-sample-s", type=float, default=0.2)
    args = ap.parse_args()
    if min(args.layers, args.head_chunks, args.tokens, args.rounds) < 1:
        ap.error("--layers, --head-chunks, --tokens and --rounds must be >= 1")
    if not cpu_bf16_gemm_native():
        print("CPU without AVX-512: libtorch runs no bf16 GEMM with oneDNN here, so there is no oneDNN copy "
              "to measure (docs/performance.md, 'bf16 on CPUs without AVX-512')")
        return 0
    torch.set_num_threads(1)
    pin_to_first_core()
    torch.manual_seed(0)
    cs = cases(args.tokens, args.layers, args.head_chunks)
    bad = []
    for c in cs:
        for a, b in zip(c["plain"](), c["packed"]()):
            d = (a.float() - b.float()).abs().max().item() / max(a.float().abs().max().item(), 1e-30)
            c["diff"] = max(c.get("diff", 0.0), d)
        if c["diff"] > 1e-2:  # one bf16 rounding apart at most; oneDNN gave identical values where measured
            bad.append(f"{c['shape']} {c['dir']}: max relative difference {c['diff']:.1e}")
    if bad:
        print("prepacked and plain GEMMs disagree: " + "; ".join(bad), file=sys.stderr)
        return 1
    fns = [f for c in cs for f in (c["plain"], c["packed"])]
    best = best_times(fns, args.rounds, args.min_sample_s)
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, 1 thread, {args.tokens} tokens, "
          f"{args.layers} distinct weights per projection, {args.head_chunks} head chunks, best of {args.rounds}")
    print("\n| weight | GEMM | at::mm ms (GFLOP/s) | prepacked ms (GFLOP/s) | at::mm / prepacked | max rel diff "
          "| second layout (MB) |")
    print("| --- " * 7 + "|")
    total_plain = total_packed = extra = 0.0
    for i, c in enumerate(cs):
        p, q = best[2 * i], best[2 * i + 1]
        total_plain += p
        total_packed += q
        extra += c["bytes"] / 1e6  # each direction's layout is a copy of the weights
        print(f"| {c['shape'].replace('|', chr(92) + '|')} | {c['dir']} | {1e3 * p:.2f} ({1e-9 * c['flops'] / p:.0f}) | "
              f"{1e3 * q:.2f} ({1e-9 * c['flops'] / q:.0f}) | {p / q:.3f}x | {c['diff']:.1e} | "
              f"{c['bytes'] / 1e6:.0f} |")
    print(f"\nAll rows: at::mm {1e3 * total_plain:.1f} ms, prepacked {1e3 * total_packed:.1f} ms "
          f"({total_plain / total_packed:.3f}x); both directions prepacked beside the plain weights: "
          f"{extra:.0f} MB more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
