#!/usr/bin/env python3
"""Where the peer's training step goes: bench/peer_torch.py's model and step (PyTorch eager, PEFT-style
LoRA, AdamW) under torch.profiler, grouped like lorabench-profile-ops' groups, so the two breakdowns sit
side by side in docs/results.md.

    $(scripts/torch-venv.sh)/bin/python bench/profile_peer.py [--preset qwen2.5-0.5b] [--precision bf16] [--steps 2]
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_torch  # noqa: E402

GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
        "aten::mkldnn_matmul", "aten::_mkldnn_matmul"}
SOFTMAX = {"aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data",
           "aten::_log_softmax_backward_data", "aten::nll_loss_forward", "aten::nll_loss_backward"}
COPIES = {"aten::copy_", "aten::_to_copy", "aten::to", "aten::contiguous", "aten::clone", "aten::cat",
          "aten::repeat_interleave", "aten::index_select", "aten::embedding_dense_backward"}


def group(name, in_optimizer):
    if in_optimizer:
        return "optimizer (AdamW)"
    if name in GEMM:
        return "GEMMs"
    if name in SOFTMAX:
        return "softmax, log-softmax and loss"
    if name in COPIES:
        return "copies and dtype casts"
    return "other ATen ops (elementwise, norms, indexing, autograd)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="qwen2.5-0.5b")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dt = torch.bfloat16 if a.precision == "bf16" else torch.float32
    model = peer_torch.Qwen2(a.preset, 16, 32, dt)
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    V = peer_torch.PRESETS[a.preset][5]
    g = torch.Generator().manual_seed(1234)

    def step():
        ids = torch.randint(0, V, (1, a.seq + 1), generator=g)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))
        loss.backward()
        with torch.profiler.record_function("peer::optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        wall = (time.perf_counter() - t0) / a.steps

    # Self time of every op, attributed to the optimizer when it runs inside its range.
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    opt_ranges = [(e.time_range.start, e.time_range.end) for e in events if e.name == "peer::optimizer"]
    groups, total = {}, 0.0
    for e in events:
        if e.name == "peer::optimizer":
            continue
        inside = any(s <= e.time_range.start and e.time_range.end <= t for s, t in opt_ranges)
        k = group(e.name, inside)
        groups[k] = groups.get(k, 0.0) + e.self_cpu_time_total
        total += e.self_cpu_time_total
    wall_us = wall * 1e6 * a.steps
    groups["outside ops (Python, autograd engine)"] = max(0.0, wall_us - total)
    print(f"peer {a.preset} {a.precision}: {wall:.3f} s per step (wall, profiler on); "
          f"{total / 1e6 / a.steps:.3f} s of ATen op self time per step\n")
    print("| group | s per step | share of the step |\n| --- | --- | --- |")
    for k, v in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {v / 1e6 / a.steps:.3f} | {100 * v / wall_us:.1f}% |")


if __name__ == "__main__":
    main()
