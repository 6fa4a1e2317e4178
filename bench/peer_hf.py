#!/usr/bin/env python3
"""The peers lorabench is measured against: what its users run instead. Hugging Face transformers'
Qwen2ForCausalLM or Qwen3ForCausalLM (the snapshot's model_type) + peft LoRA (r16, alpha 32, the seven projections, no dropout: inputs/bench.ini) and a
plain torch.optim.AdamW loop (lr 1e-4, no weight decay, no clipping), on the weights of one snapshot and
lorabench's synthetic tokens (bench/equal_work.py). Prints one JSON line (rank 0): step times, step-0
loss, tokens/s, peak CUDA memory on a GPU.

    python bench/peer_hf.py --model DIR [--mode eager|compile|liger] [--steps N] [--warmup N]
    python -m torch.distributed.run --nproc-per-node 2 bench/peer_hf.py --model DIR --dist ddp|fsdp2

--mode compile wraps the model in torch.compile (the warm-up steps include the compilation); --mode
liger applies Liger Kernel's Qwen2 or Qwen3 kernels (Triton: CUDA only). --dist ddp is DistributedDataParallel
(gloo on CPU, NCCL on GPU); --dist fsdp2 is fully_shard per decoder layer and at the root, the usual FSDP
recipe: fp32 parameters sharded, compute in --dtype (MixedPrecisionPolicy), fp32 gradient reduction.
--dtype is the model's dtype (bf16, the default, or fp32), as lorabench's model.dtype.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from equal_work import first_sample, synthetic_ids  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="snapshot directory (config.json + model.safetensors)")
    ap.add_argument("--mode", choices=["eager", "compile", "liger"], default="eager")
    ap.add_argument("--dist", choices=["none", "ddp", "fsdp2"], default="none")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="the model's dtype")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1, help="micro-batch per rank")
    ap.add_argument("--steps", type=int, default=5, help="measured steps")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    ap.add_argument("--seed", type=int, default=1234, help="lorabench's run.seed (the synthetic tokens)")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=32)
    ap.add_argument("--lora-dropout", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=1e-4)
    return ap.parse_args()


def setup_dist(args):
    """(rank, world, device) after init_process_group when launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.dist == "none":
        if world != 1:
            raise SystemExit("peer_hf: launched on several ranks without --dist")
        return 0, 1, torch.device(args.device)
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        return rank, world, torch.device("cuda", local)
    dist.init_process_group("gloo")
    return rank, world, torch.device("cpu")


def pin_core(device):
    """On a CPU, one core per rank, in order, as lorabench's mpirun --bind-to core places its ranks."""
    if device.type == "cpu" and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[int(os.environ.get("LOCAL_RANK", "0")) % len(cores)]})


def build_model(args, device):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    family = AutoConfig.from_pretrained(args.model).model_type  # qwen2 or qwen3 (the snapshot's config.json)
    if args.mode == "liger":
        if device.type != "cuda":
            raise SystemExit("peer_hf: --mode liger needs CUDA (Liger Kernel's kernels are Triton)")
        import liger_kernel.transformers as liger
        # rope, RMSNorm, SwiGLU, fused linear + cross-entropy
        (liger.apply_liger_kernel_to_qwen3 if family == "qwen3" else liger.apply_liger_kernel_to_qwen2)()
    # FSDP2 needs one dtype per sharded group: fp32 parameters, compute in --dtype through its policy.
    compute = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    dtype = torch.float32 if args.dist == "fsdp2" else compute
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa").to(device)
    if type(model).__name__ != {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}.get(family):
        raise SystemExit(f"peer_hf: {args.model} loaded as {type(model).__name__} (model_type {family})")
    # A transformers that does not know the `dtype` keyword (before 4.56) would load fp32 without a word.
    got = {p.dtype for p in model.parameters()}
    if got != {dtype}:
        raise SystemExit(f"peer_hf: the model loaded as {sorted(map(str, got))}, not {dtype} "
                         f"(transformers {__import__('transformers').__version__})")
    cfg = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                     target_modules=TARGETS, bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(model, cfg)
    # from_pretrained returns the model in eval mode. Training runs in train mode: Liger's Qwen2 forward
    # takes its fused linear + cross-entropy (no logits) only there, and LoRA dropout applies only there.
    model.train()
    if args.dist == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    elif args.dist == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
        for layer in model.base_model.model.model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    if args.mode == "compile":
        model = torch.compile(model)
    return model


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    rank, world, device = setup_dist(args)
    pin_core(device)
    model = build_model(args, device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    with open(os.path.join(args.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    times, losses = [], []
    for step in range(args.warmup + args.steps):
        ids = torch.from_numpy(synthetic_ids(args.seed, vocab, args.seq,
                                             first_sample(step, rank, args.batch, world), args.batch)).to(device)
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)  # transformers shifts: position t predicts ids[t+1]
        if args.mode == "liger" and step == 0 and out.logits is not None:
            raise SystemExit("peer_hf: Liger's fused linear + cross-entropy did not run (the forward returned "
                             "the logits): this liger-kernel does not patch this transformers' Qwen2 as expected")
        loss = out.loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
        losses.append(loss.detach().float())

    # The global batch's loss (lorabench's definition): every rank counts the same tokens, so the mean of
    # the ranks' means. The slowest rank's median step sets the job's pace.
    loss_t = torch.stack(losses)
    step_t = torch.tensor([sorted(times)[len(times) // 2]], dtype=torch.float64)
    if world > 1:
        import torch.distributed as dist
        loss_t, step_t = loss_t.to(device), step_t.to(device)
        dist.all_reduce(loss_t)
        loss_t /= world
        dist.all_reduce(step_t, op=dist.ReduceOp.MAX)
    step_s = float(step_t[0])
    if rank == 0:
        out = {"peer": f"hf-{args.mode}" + ("" if args.dist == "none" else f"-{args.dist}"),
               "torch": torch.__version__, "device": device.type, "dtype": args.dtype, "world": world, "seq": args.seq,
               "batch": args.batch, "threads": args.threads, "step_time_s": step_s,
               "tokens_per_s": world * args.batch * args.seq / step_s, "loss_step0": float(loss_t[0]),
               "losses": [float(x) for x in loss_t], "trainable": sum(p.numel() for p in params),
               "cuda_peak_mib": torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None}
        print(json.dumps(out), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
