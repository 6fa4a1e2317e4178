#!/usr/bin/env python3
"""Where a peer's training step goes, under torch.profiler, in groups that sit beside
lorabench-profile-ops' (docs/performance.md, "Where the time goes"). The peers are those of scripts/bench.sh:
transformers' Qwen2ForCausalLM + peft LoRA with a plain AdamW loop (bench/peer_hf.py), eager or under
torch.compile, on the benchmark's snapshot and tokens (bench/equal_work.py); --peer torch is the older
hand-written PyTorch model of bench/peer_torch.py.

    $(scripts/torch-venv.sh)/bin/python bench/profile_peer.py [--peer hf|torch] [--mode eager|compile]
        [--preset qwen2.5-0.5b] [--precision bf16] [--seq 256] [--steps 2] [--warmup 1]
    $(scripts/torch-venv.sh)/bin/python -m torch.distributed.run --standalone --nproc-per-node 2 bench/profile_peer.py \
        --dist ddp|fsdp2 [...]

One thread per rank (as the benchmark), CPU. The profiler adds a fixed cost to every op: read the shares.
--device cuda profiles on GPU 0 (with --mode liger too; the GPU benchmark's workload is --seq 2048 --batch 8):
each op's time is then the GPU time of the kernels it launched (torch.profiler's self device time), kernels
launched outside any op (Liger's Triton kernels) are a group of their own, and the rest of the step is the
GPU standing idle (Python, launches, host synchronisations).
--dist ds-zero2 (ds-zero3, ...) profiles the DeepSpeed side of scripts/bench.sh --deepspeed the same way
(DeepSpeed's whole engine.step is the "optimizer" group: its fused CPU Adam, a C++ extension the profiler does
not record, is the self time of the optimizer range, and the all-gather of the updated partitions is inside
it; its gradient reductions during backward are collectives).
--dist profiles the hf peer's DDP or FSDP2 (gloo, as scripts/bench.sh runs them) on rank 0: its main
thread's ops (gloo's own threads move the bytes), with the time it stood waiting for FSDP2's collectives
as a group of its own (DDP's reducer waits outside any recorded range: that wait is in "outside ops").
"""
import argparse
import json
import os
import sys
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from equal_work import first_sample, synthetic_ids, write_snapshot  # noqa: E402

SEED = 1234
GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
        "aten::mkldnn_matmul", "aten::_mkldnn_matmul", "mkldnn::_linear_pointwise", "mkl::_mkl_linear"}
# What FSDP2 and DDP record around their collectives: the self time of these ranges is the main thread
# waiting for gloo's threads to finish the transfer (their copies in and out are ATen ops of their own).
COLLECTIVES = ("FSDP::all_gather", "FSDP::post_backward_reduce", "c10d::", "gloo:", "record_param_comms")
# libtorch's fused attention: the CPU's flash kernel; on a GPU FlashAttention-2, the memory-efficient or the
# cuDNN kernel (their work is in the inner _flash_attention_* / _efficient_attention_* / _cudnn_* ops).
ATTENTION = ("aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention",
             "aten::_cudnn_attention")
SOFTMAX = {"aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data",
           "aten::_log_softmax_backward_data", "aten::nll_loss_forward", "aten::nll_loss_backward"}
COPIES = {"aten::copy_", "aten::_to_copy", "aten::to", "aten::contiguous", "aten::clone", "aten::cat",
          "aten::repeat_interleave", "aten::index_select", "aten::embedding_dense_backward"}
# Ranges and wrappers whose self time is their children's bookkeeping, not work of their own.
# peer::optimizer is not one: its self time is the optimizer's work that no op records (DeepSpeed's fused CPU
# Adam, a C++ extension) and its Python, which belong to the optimizer group.
WRAPPERS = ("ProfilerStep", "Optimizer.step", "Optimizer.zero_grad", "autograd::engine",
            "CompiledFunction", "CompiledFunctionBackward", "Torch-Compiled Region")


def group(name, in_optimizer):
    if in_optimizer:
        return "optimizer (AdamW)"
    if name in GEMM:
        return "GEMMs"
    if name.startswith(ATTENTION):
        return "attention (libtorch's fused kernels)"
    if name in SOFTMAX:
        return "softmax, log-softmax and loss"
    if name in COPIES:
        return "copies and dtype casts"
    if name.startswith(COLLECTIVES):
        return "collectives (waiting for gloo's transfers)"
    if name.startswith("## Call CompiledFxGraph"):  # its self time: the graph's generated C++ kernels
        return "torch.compile's generated kernels"
    return "other ATen ops (elementwise, norms, indexing, autograd)"


def hf_step(a):
    import peer_hf
    args = SimpleNamespace(mode=a.mode, dist=a.dist, device=a.device, lora_r=16, lora_alpha=32, lora_dropout=0.0,
                           dtype=a.precision, batch=a.batch, lr=1e-4)
    rank, world, device = peer_hf.setup_dist(args)
    if rank == 0:
        write_snapshot(a.preset, SEED)
    if world > 1:
        torch.distributed.barrier()
    args.model = write_snapshot(a.preset, SEED)
    peer_hf.pin_core(device)
    ds_cfg = peer_hf.deepspeed_config(args, world) if a.dist in peer_hf.DEEPSPEED else None
    model = peer_hf.build_model(args, device, ds_cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    engine = None
    if ds_cfg:  # DeepSpeed's engine as scripts/bench.sh --deepspeed runs it (its comms logger off here)
        import deepspeed
        ds_cfg["comms_logger"]["enabled"] = False
        engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=ds_cfg)
        model = engine
    else:
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    with open(os.path.join(args.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    count = [0]

    def step():
        ids = torch.from_numpy(synthetic_ids(SEED, vocab, a.seq, first_sample(count[0], rank, a.batch, world),
                                             a.batch)).to(device)
        count[0] += 1
        loss = model(input_ids=ids, labels=ids).loss
        if engine is not None:
            engine.backward(loss)
            with torch.profiler.record_function("peer::optimizer"):
                engine.step()
            return
        loss.backward()
        with torch.profiler.record_function("peer::optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
    name = a.dist.replace("ds-", "deepspeed-") if engine is not None else f"hf-{a.mode}" + (
        "" if a.dist == "none" else f"-{a.dist}")
    return step, name + ("" if a.dist == "none" else f" (rank 0 of {world})"), rank


def torch_step(a):
    import peer_torch
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
    return step, "hand-written peer_torch", 0


def in_optimizer(events):
    """Whether each event runs inside a peer::optimizer range."""
    ranges = [(e.time_range.start, e.time_range.end) for e in events if e.name == "peer::optimizer"]
    return lambda e: any(s <= e.time_range.start and e.time_range.end <= t for s, t in ranges)


def cpu_groups(prof):
    """Self CPU time of every op of the thread that runs the step (not gloo's), by group."""
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    main_thread = next(e.thread for e in events if e.name == "peer::optimizer")
    events = [e for e in events if e.thread == main_thread]
    inside = in_optimizer(events)
    groups, total = {}, 0.0
    for e in events:
        if e.name.startswith(WRAPPERS):
            continue
        k = group(e.name, inside(e))
        groups[k] = groups.get(k, 0.0) + e.self_cpu_time_total
        total += e.self_cpu_time_total
    return groups, total


def device_groups(prof):
    """GPU time by group: each op's self device time (the kernels it launched; every thread, the backward's
    included), and the kernels no op launched (Triton kernels called from Python: Liger's) as their own."""
    events = prof.events()
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    kernels = sum(e.device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    inside = in_optimizer(cpu)
    groups, attributed = {}, 0.0
    for e in cpu:
        t = e.self_device_time_total
        if t > 0:
            k = group(e.name, inside(e))
            groups[k] = groups.get(k, 0.0) + t
            attributed += t
    if kernels > attributed:
        groups["kernels launched outside any op (Triton: Liger)"] = kernels - attributed
    return groups, max(kernels, attributed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", choices=["hf", "torch"], default="hf")
    ap.add_argument("--mode", choices=["eager", "compile", "liger"], default="eager", help="hf only; liger: cuda only")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--batch", type=int, default=1, help="micro-batch (per rank)")
    ap.add_argument("--dist", choices=["none", "ddp", "fsdp2", "ds-zero2", "ds-zero3", "ds-zero3-offload",
                                       "ds-zero3-offload-param"], default="none",
                    help="hf only; launched by torch.distributed.run (ds-*: DeepSpeed's engine, DS_ACCELERATOR=cpu)")
    ap.add_argument("--preset", default="qwen2.5-0.5b")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                    help="the model's dtype (scripts/bench.sh --dtype)")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1, help="torch.compile compiles here: give it 2")
    a = ap.parse_args()
    if a.dist != "none" and a.peer != "hf":
        ap.error("--dist profiles the hf peer only")
    if a.peer != "hf" and (a.device != "cpu" or a.batch != 1):
        ap.error("--peer torch profiles one sequence on the CPU only")
    if a.mode == "liger" and a.device != "cuda":
        ap.error("--mode liger needs --device cuda (Liger Kernel's kernels are Triton)")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    if a.dist != "none" and int(os.environ.get("WORLD_SIZE", "1")) < 2:
        ap.error(f"--dist {a.dist} needs 2 or more ranks: launch it with python -m torch.distributed.run --standalone "
                 "--nproc-per-node 2")
    torch.set_num_threads(1)
    step, name, rank = hf_step(a) if a.peer == "hf" else torch_step(a)

    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(a.warmup):
        step()
    sync()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        sync()
        wall = (time.perf_counter() - t0) / a.steps

    if a.dist != "none":
        torch.distributed.destroy_process_group()
    if rank != 0:
        return
    groups, total = device_groups(prof) if cuda else cpu_groups(prof)
    wall_us = wall * 1e6 * a.steps
    if cuda:
        groups["GPU idle (Python, launches, host synchronisations)"] = max(0.0, wall_us - total)
    else:
        groups["outside ops (Python, autograd engine)"] = max(0.0, wall_us - total)
    shape = f"seq {a.seq}" + (f", micro-batch {a.batch}" if a.batch != 1 else "") + (", cuda:0" if cuda else "")
    print(f"{name} {a.preset} {a.precision}, {shape}: {wall:.3f} s per step (wall, profiler on); "
          f"{total / 1e6 / a.steps:.3f} s of {'kernel time' if cuda else 'op self time'} per step\n")
    print("| group | s per step | share of the step |\n| --- | --- | --- |")
    for k, v in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {v / 1e6 / a.steps:.3f} | {100 * v / wall_us:.1f}% |")


if __name__ == "__main__":
    main()
