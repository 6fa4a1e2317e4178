#!/usr/bin/env python3
"""The peers lorabench is measured against: what its users run instead. Hugging Face transformers'
Qwen2ForCausalLM, Qwen3ForCausalLM or Qwen3_5ForCausalLM (the snapshot's model_type; Qwen3.5 on transformers' torch
fallback for the delta rule and the convolution, what a CPU user has) + peft LoRA (r16, alpha 32, no dropout, the
seven projections and on Qwen3.5 the linear layers' five: equal_work.lora_targets, inputs/bench.ini) and a
plain torch.optim.AdamW loop (lr 1e-4, no weight decay, no clipping), on the weights of one snapshot and
lorabench's synthetic tokens (bench/equal_work.py). Prints one JSON line (rank 0): step times, step-0
loss, tokens/s, peak CUDA memory on a GPU.

    python bench/peer_hf.py --model DIR [--mode eager|compile|liger] [--steps N] [--warmup N]
    python -m torch.distributed.run --nproc-per-node 2 bench/peer_hf.py --model DIR --dist ddp|fsdp2
    DS_ACCELERATOR=cpu python -m torch.distributed.run --nproc-per-node 2 bench/peer_hf.py --model DIR \
        --dist ds-zero2|ds-zero3|ds-zero3-offload|ds-zero3-offload-param

--mode compile wraps the model in torch.compile (the warm-up steps include the compilation); --mode
liger applies Liger Kernel's Qwen2 or Qwen3 kernels (Triton: CUDA only). --dist ddp is DistributedDataParallel
(gloo on CPU, NCCL on GPU); --dist fsdp2 is fully_shard per decoder layer and at the root, the usual FSDP
recipe: fp32 parameters sharded, compute in --dtype (MixedPrecisionPolicy), fp32 gradient reduction.
--dtype is the model's dtype (bf16, the default, or fp32), as lorabench's model.dtype.

--dist ds-* is DeepSpeed's engine, as its users write it (deepspeed_config below; the JSON line carries the
ds_config used): ZeRO stage 2 or 3, stage 3 optionally with the optimizer (and the parameters) offloaded to
the CPU, DeepSpeed's own AdamW (its fused CPU Adam, or its CPU Adam when offloaded; compiled on first use
into torch's extension cache), bf16 through its bf16 section (fp32 master weights in the optimizer), gloo on
CPU, NCCL on GPU. ZeRO-3 loads the model inside zero.Init (HfDeepSpeedConfig), as transformers' Trainer does,
so no rank holds the whole model. The JSON line also carries the bytes DeepSpeed's comms logger saw per
measured step (the send side of each collective, as lorabench counts them) and DeepSpeed's own memory
estimate of the run (estimate_zero2/zero3_model_states_mem_needs, as its *_all_live helpers call them).
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from equal_work import first_sample, lora_targets, synthetic_ids  # noqa: E402

# transformers' class of each model_type the benchmark writes (bench/equal_work.py hf_config)
CLASSES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_5_text": "Qwen3_5ForCausalLM"}
# --dist of DeepSpeed: (ZeRO stage, offload_optimizer to the CPU, offload_param to the CPU)
DEEPSPEED = {"ds-zero2": (2, False, False), "ds-zero3": (3, False, False), "ds-zero3-offload": (3, True, False),
             "ds-zero3-offload-param": (3, True, True)}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="snapshot directory (config.json + model.safetensors)")
    ap.add_argument("--mode", choices=["eager", "compile", "liger"], default="eager")
    ap.add_argument("--dist", choices=["none", "ddp", "fsdp2"] + sorted(DEEPSPEED), default="none")
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
    if args.dist in DEEPSPEED:
        import deepspeed
        if args.device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        deepspeed.init_distributed(dist_backend="nccl" if args.device == "cuda" else "gloo")
        return rank, world, (torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda"
                             else torch.device("cpu"))
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


def deepspeed_config(args, world):
    """The ds_config of --dist ds-*: what a DeepSpeed user writes for this run. The ZeRO section names only the
    stage and the offloads (DeepSpeed's defaults for buckets, overlap and prefetch); the optimizer is
    DeepSpeed's AdamW with the peer's lr, betas and eps, no weight decay; no gradient clipping, as lorabench."""
    stage, offload_optimizer, offload_param = DEEPSPEED[args.dist]
    zero = {"stage": stage}
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if offload_param:
        zero["offload_param"] = {"device": "cpu"}
    return {"train_micro_batch_size_per_gpu": args.batch, "gradient_accumulation_steps": 1,
            "train_batch_size": args.batch * world,
            "optimizer": {"type": "AdamW", "params": {"lr": args.lr, "betas": [0.9, 0.999], "eps": 1e-8,
                                                      "weight_decay": 0.0}},
            "bf16": {"enabled": args.dtype == "bf16"}, "gradient_clipping": 0.0, "zero_optimization": zero,
            "steps_per_print": 10**9, "wall_clock_breakdown": False,
            "comms_logger": {"enabled": True, "prof_all": True, "verbose": False, "debug": False}}


def numel(p):
    """A parameter's element count, also when ZeRO-3 has partitioned it (its local tensor is then empty)."""
    return p.ds_numel if hasattr(p, "ds_numel") else p.numel()


def deepspeed_estimate(args, model, world):
    """DeepSpeed's own prediction of the run's memory, bytes: estimate_zero2/zero3_model_states_mem_needs
    with the total parameter count and the largest module's own parameters, as its *_all_live helpers count
    them (every parameter, trainable or not), for one node of `world` ranks. It returns host (CPU) memory
    for the node and device memory per rank; on a CPU run both are the ranks' resident memory, so per rank
    = device + host / ranks; on a GPU per rank = device (what the table measures there)."""
    stage, offload_optimizer, offload_param = DEEPSPEED[args.dist]
    total = sum(numel(p) for p in model.parameters())
    if stage == 2:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
        host, dev = estimate_zero2_model_states_mem_needs(total, num_gpus_per_node=world, num_nodes=1,
                                                          cpu_offload=offload_optimizer)
        largest = None
    else:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
        largest = max(sum(numel(p) for p in m.parameters(recurse=False)) for m in model.modules())
        host, dev, _ = estimate_zero3_model_states_mem_needs(total, largest, num_gpus_per_node=world, num_nodes=1,
                                                             cpu_offload=offload_optimizer,
                                                             cpu_offload_params=offload_param, zero_init=True)
    return {"function": f"estimate_zero{stage}_model_states_mem_needs", "total_params": total,
            "largest_layer_params": largest, "host_bytes_per_node": host, "device_bytes_per_rank": dev,
            "per_rank_bytes": dev if args.device == "cuda" else dev + host / world}


def config_json(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def build_model(args, device, ds_cfg=None):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    family = AutoConfig.from_pretrained(args.model).model_type  # the snapshot's config.json
    if family not in CLASSES:
        raise SystemExit(f"peer_hf: {args.model}: model_type {family!r} (expected one of {', '.join(CLASSES)})")
    if args.mode == "liger":
        if device.type != "cuda":
            raise SystemExit("peer_hf: --mode liger needs CUDA (Liger Kernel's kernels are Triton)")
        if family not in ("qwen2", "qwen3"):
            raise SystemExit(f"peer_hf: --mode liger has kernels for Qwen2 and Qwen3, not {family}")
        import liger_kernel.transformers as liger
        # rope, RMSNorm, SwiGLU, fused linear + cross-entropy
        (liger.apply_liger_kernel_to_qwen3 if family == "qwen3" else liger.apply_liger_kernel_to_qwen2)()
    # FSDP2 needs one dtype per sharded group: fp32 parameters, compute in --dtype through its policy.
    compute = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    dtype = torch.float32 if args.dist == "fsdp2" else compute
    zero_init = None
    if ds_cfg and ds_cfg["zero_optimization"]["stage"] == 3:
        # transformers loads the weights inside deepspeed.zero.Init while this object lives (its Trainer's way)
        from transformers.integrations import HfDeepSpeedConfig
        zero_init = HfDeepSpeedConfig(ds_cfg)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa")
    if zero_init is None:
        model = model.to(device)
    if type(model).__name__ != CLASSES[family]:
        raise SystemExit(f"peer_hf: {args.model} loaded as {type(model).__name__} (model_type {family})")
    # A transformers that does not know the `dtype` keyword (before 4.56) would load fp32 without a word.
    got = {p.dtype for p in model.parameters()}
    if got != {dtype}:
        raise SystemExit(f"peer_hf: the model loaded as {sorted(map(str, got))}, not {dtype} "
                         f"(transformers {__import__('transformers').__version__})")
    cfg = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                     target_modules=lora_targets(config_json(args.model), args.lora_r), bias="none",
                     task_type="CAUSAL_LM")
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
    model._lorabench_zero_init = zero_init  # keeps HfDeepSpeedConfig alive until deepspeed.initialize
    return model


def deepspeed_comm_bytes(steps):
    """Bytes per step per collective that DeepSpeed's comms logger recorded since its last reset (its msg size:
    the tensor each rank sends, the whole input of a reduce-scatter; lorabench's convention) and calls."""
    from deepspeed.comm import comms_logger
    out = {}
    for name, sizes in comms_logger.comms_dict.items():
        calls = sum(v[0] for v in sizes.values())
        out[name] = {"bytes_per_step": sum(size * v[0] for size, v in sizes.items()) / steps,
                     "calls_per_step": calls / steps}
    return out


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    rank, world, device = setup_dist(args)
    pin_core(device)
    ds_cfg = deepspeed_config(args, world) if args.dist in DEEPSPEED else None
    model = build_model(args, device, ds_cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sum(numel(p) for p in params)
    engine = estimate = None
    if ds_cfg:
        import deepspeed
        estimate = deepspeed_estimate(args, model, world)
        engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=ds_cfg)
        model = engine
    else:
        opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    with open(os.path.join(args.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    times, losses = [], []
    for step in range(args.warmup + args.steps):
        if engine is not None and step == args.warmup:
            from deepspeed.comm import comms_logger
            comms_logger.comms_dict.clear()  # the measured steps' collectives only
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
        if engine is not None:
            engine.backward(loss)
            engine.step()  # DeepSpeed's optimizer step and zero_grad
        else:
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
    comm = deepspeed_comm_bytes(args.steps) if engine is not None else None
    if rank == 0:
        peer = args.dist.replace("ds-", "deepspeed-") if engine is not None else \
            f"hf-{args.mode}" + ("" if args.dist == "none" else f"-{args.dist}")
        out = {"peer": peer,
               "torch": torch.__version__, "device": device.type, "dtype": args.dtype, "world": world, "seq": args.seq,
               "batch": args.batch, "threads": args.threads, "step_time_s": step_s,
               "tokens_per_s": world * args.batch * args.seq / step_s, "loss_step0": float(loss_t[0]),
               "losses": [float(x) for x in loss_t], "trainable": trainable,
               "cuda_peak_mib": torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None,
               "intra_op_threads": torch.get_num_threads()}
        if engine is not None:
            out.update(deepspeed=__import__("deepspeed").__version__, ds_config=ds_cfg, ds_estimate=estimate,
                       comm=comm, comm_bytes_per_step=sum(x["bytes_per_step"] for x in comm.values()))
        print(json.dumps(out), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
