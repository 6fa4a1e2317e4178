#!/usr/bin/env python3
"""The frame LoRA-MFU is measured against (bench/run_bench.py): the rate at which this machine's GEMM path
runs the GEMMs of the model's own training step, at their best.

The path is ATen's (oneDNN for bf16 on CPU, cuBLAS on GPU): the same libtorch lorabench is built
against and the peers run on. On a CPU without AVX-512, libtorch's bf16 GEMM is its reference loops (7-90x
slower than fp32); the fastest GEMM of these bf16 values there is fp32 on the values widened, which is
what lorabench runs (src/model/gemm.cpp), and that is the frame (benchlib.cpu_bf16_gemm_native). With
--dtype fp32 (the table's fp32 workloads) the GEMMs are fp32 everywhere (no TF32 on a GPU: neither side
enables it).

The shapes are the step's large GEMMs at its token count T = micro-batch x seq: per decoder layer the
packed q|k|v, o, packed gate|up and down projections (a Qwen3.5 linear-attention layer's packed
in_proj_qkv|z|b|a and out_proj instead of q|k|v and o), each as the forward x @ W^T and as the
input-gradient dY @ W; the LM head as vocabulary chunks of 16384 columns (logits
h @ E_c^T and the accumulation p @ E_c). Each shape is timed in samples of at least --min-sample-s,
interleaved with the other shapes for --rounds rounds; a shape's time is the best of its samples (noise
only ever slows a GEMM down). The frame is the step's GEMM FLOPs over the sum of the shapes' best times
weighted by how often the step runs them: a FLOP-weighted harmonic mean of the best rates, i.e. the
speed of a step that would be nothing but its GEMMs, each at its best.

    python bench/frame.py --model DIR [--seq 256] [--batch 1] [--threads 1] [--device cpu] [--dtype bf16]

Prints one JSON line: frame_flops_per_s, the per-shape best rates, and how the figure was taken.
"""
import argparse
import json
import os
import time

import torch

from benchlib import best_times, cpu_gemm_dtype, pin_to_first_core

HEAD_CHUNK = 16384  # lorabench's vocabulary chunk (docs/model.md)


def layer_projections(cfg):
    """Per decoder layer, its projections as {name: (in, out)} in the order they run: a full-attention layer's
    q, k, v, o (Qwen3.5's q also gives each head its output gate, so twice the width), a Gated DeltaNet layer's
    in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj (Qwen3.5's linear_attention layers, config.json's
    layer_types), then the MLP's gate, up and down."""
    d, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    hd = cfg.get("head_dim", d // heads)
    q, kv = heads * hd, cfg["num_key_value_heads"] * hd
    gated = cfg.get("model_type") == "qwen3_5_text"
    mlp = {"gate": (d, inter), "up": (d, inter), "down": (inter, d)}
    full = {"q": (d, 2 * q if gated else q), "k": (d, kv), "v": (d, kv), "o": (q, d), **mlp}
    out = []
    for kind in cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]:
        if kind == "linear_attention":
            key = cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
            value_heads = cfg["linear_num_value_heads"]
            value = value_heads * cfg["linear_value_head_dim"]
            out.append({"in_proj_qkv": (d, 2 * key + value), "in_proj_z": (d, value), "in_proj_b": (d, value_heads),
                        "in_proj_a": (d, value_heads), "out_proj": (value, d), **mlp})
        elif kind == "full_attention":
            out.append(full)
        else:
            raise SystemExit(f"frame: layer type {kind!r} unknown (full_attention or linear_attention)")
    return out


# The projections whose input is the layer's normed input (no input gradient in layer 0 under LoRA), and the
# groups lorabench runs as one GEMM (packed weights).
MIXER_INPUTS = ("q", "k", "v", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")
PACKED = {"qkv": ("q", "k", "v"), "in_proj": ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"),
          "gate_up": ("gate", "up")}


def step_gemms(cfg, tokens):
    """(name, M, K, N, transposed_b, count per step) of the step's large GEMMs: a (M, K) @ b (K, N)."""
    d, vocab = cfg["hidden_size"], cfg["vocab_size"]
    counts = {}  # (name, in, out) -> layers running it
    for layer in layer_projections(cfg):
        done = set()
        for name, members in PACKED.items():
            if members[0] in layer:
                key = (name, layer[members[0]][0], sum(layer[m][1] for m in members))
                counts[key] = counts.get(key, 0) + 1
                done.update(members)
        for name, (i, o) in layer.items():
            if name not in done:
                counts[(name, i, o)] = counts.get((name, i, o), 0) + 1
    out = []
    for (name, cols, rows), n in counts.items():
        out.append((f"{name} fwd", tokens, cols, rows, True, n))    # x (T, in) @ W^T
        out.append((f"{name} dgrad", tokens, rows, cols, False, n))  # dY (T, out) @ W
    chunks, last = divmod(vocab, HEAD_CHUNK)
    for n, count in ((HEAD_CHUNK, chunks), (last, 1 if last else 0)):
        if count:
            out.append((f"head {n} logits", tokens, d, n, True, count))
            out.append((f"head {n} accumulate", tokens, n, d, False, count))
    return out


def lora_flops_per_token(cfg, seq, r, targets=None, chunk=64):
    """docs/metrics.md's LoRA FLOPs per token with adapters of rank r on the projections named in targets
    (lorabench's names, layer_projections'; None: every projection): forward GEMMs, input gradients of the base
    (none for layer 0's projections of the normed input: their input needs no gradient) and of the adapters, the
    adapters' weight gradients, full attention (4·T·d per head forward, twice that backward) and the gated delta
    rule (C(5dk + 3dv) + 6·dk·dv per value head forward with chunks of C, twice that backward). lorabench records
    the same figure (flops_per_token); run_bench.py checks that they agree."""
    d, vocab = cfg["hidden_size"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    hd = cfg.get("head_dim", d // heads)
    layers = layer_projections(cfg)
    adapted = [{n: io for n, io in layer.items() if targets is None or n in targets} for layer in layers]
    n_matmul = sum(i * o for layer in layers for i, o in layer.values()) + vocab * d
    n_lora = r * sum(i + o for layer in adapted for i, o in layer.values())
    first_inputs = [io for name, io in layers[0].items() if name in MIXER_INPUTS]
    first_adapted = [io for name, io in adapted[0].items() if name in MIXER_INPUTS]
    forward = 2 * (n_matmul + n_lora)
    dx_base = 2 * (n_matmul - sum(i * o for i, o in first_inputs))
    dx_lora_b = 2 * r * sum(o for layer in adapted for _, o in layer.values())
    dx_lora_a = 2 * r * (sum(i for layer in adapted for i, _ in layer.values()) - sum(i for i, _ in first_adapted))
    dw_lora = 2 * n_lora
    n_full = sum("o" in layer for layer in layers)
    attention = 12 * n_full * heads * hd * seq
    delta = 0
    if len(layers) > n_full:
        dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        per_head = chunk * (5 * dk + 3 * dv) + 6 * dk * dv
        delta = 3 * (len(layers) - n_full) * cfg["linear_num_value_heads"] * per_head
    return forward + dx_base + dx_lora_b + dx_lora_a + dw_lora + attention + delta


def measure(cfg, tokens, dtype, device, rounds, min_sample_s):
    """dtype: the values' type (bf16 or fp32); the GEMMs run in `dtype`, or a bf16 one in fp32 on its values
    on a CPU without AVX-512 (widen_to)."""
    widen_to = cpu_gemm_dtype(torch) if device.type == "cpu" and dtype == torch.bfloat16 else dtype
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    cases = []
    for name, m, k, n, trans, count in step_gemms(cfg, tokens):
        a = torch.randn(m, k, device=device).to(dtype).to(widen_to)
        b = torch.randn(n, k, device=device).to(dtype).to(widen_to)
        b = b.t() if trans else b.view(k, n)
        c = torch.empty(m, n, device=device, dtype=widen_to)
        cases.append({"name": name, "mkn": [m, k, n], "count": count,
                      "fn": lambda a=a, b=b, c=c: torch.mm(a, b, out=c)})
    for x, best in zip(cases, best_times([x["fn"] for x in cases], rounds, min_sample_s, sync)):
        x["best_s"] = best
    flops = sum(2.0 * x["mkn"][0] * x["mkn"][1] * x["mkn"][2] * x["count"] for x in cases)
    seconds = sum(x["best_s"] * x["count"] for x in cases)
    shapes = [{"name": x["name"], "mkn": x["mkn"], "count": x["count"],
               "best_gflops": 2e-9 * x["mkn"][0] * x["mkn"][1] * x["mkn"][2] / x["best_s"]} for x in cases]
    return flops / seconds, shapes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="snapshot directory (its config.json gives the shapes)")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--min-sample-s", type=float, default=0.05)
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="the model's dtype")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.device == "cpu":
        pin_to_first_core()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    tokens = args.seq * args.batch
    t0 = time.time()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    rate, shapes = measure(cfg, tokens, dtype, torch.device(args.device), args.rounds, args.min_sample_s)
    native = args.device == "cuda" or dtype == torch.float32 or cpu_gemm_dtype(torch) == torch.bfloat16
    gemms = args.dtype if native else "fp32 (bf16 values; no AVX-512, see frame.py)"
    how = (f"{gemms} GEMMs of the step's shapes (T={tokens}) via ATen, FLOP-weighted best of {args.rounds} "
           f"interleaved rounds of >= {args.min_sample_s:g} s samples, {args.threads} thread(s), {args.device}")
    print(json.dumps({"frame_flops_per_s": rate, "how": how, "shapes": shapes,
                      "seconds": time.time() - t0}), flush=True)


if __name__ == "__main__":
    main()
