"""What makes lorabench and a peer do the same work (bench/run_bench.py, bench/peer_hf.py):

- one weight snapshot (config.json + model.safetensors) that lorabench loads through model.path and the
  peer through transformers' from_pretrained, written once per preset and seed and cached;
- the same tokens: lorabench's synthetic source (src/data/synthetic.cpp) reproduced bit for bit;
- the step-0 check: LoRA B is zero at initialisation, so the first loss depends only on the base weights
  and the tokens; both sides must report it within loss_rtol(dtype).

Torch-free except write_snapshot (imports torch and safetensors lazily).
"""
import json
import os
import shutil

import numpy as np

# The shapes of src/model/shape.cpp's presets: vocab, hidden, intermediate, layers, heads, kv heads, tied head.
PRESETS = {
    "tiny": (151936, 64, 176, 2, 4, 2, True),
    "small": (32000, 256, 768, 4, 8, 2, True),
    "qwen2.5-0.5b": (151936, 896, 4864, 24, 14, 2, True),
    "qwen2.5-1.5b": (151936, 1536, 8960, 28, 12, 2, True),
    "qwen2.5-7b": (152064, 3584, 18944, 28, 28, 4, False),
    "qwen3-tiny": (151936, 64, 176, 2, 4, 2, True),
    "qwen3-0.6b": (151936, 1024, 3072, 28, 16, 8, True),
}
# Qwen3 presets: their head_dim (not hidden / heads); no q/k/v biases, per-head q_norm and k_norm.
QWEN3_HEAD_DIM = {"qwen3-tiny": 32, "qwen3-0.6b": 128}


def head_dim(preset):
    vocab, hidden, inter, layers, heads, kv, tied = PRESETS[preset]
    return QWEN3_HEAD_DIM.get(preset, hidden // heads)

# Relative tolerance of the step-0 loss check in bf16. The sides round at different points (packed
# q|k|v and gate|up GEMMs, SwiGLU rounded once or twice, a chunked head or full logits). Measured with
# write_snapshot's weights: lorabench against transformers + peft eager 7e-5 (tiny) and 1.5e-4
# (qwen2.5-0.5b); the same peer on the next seed's tokens 2.4e-3 and 5.7e-3, which the check must catch
# (tests/e2e/bench_peers.cmake makes it fail on purpose).
LOSS_RTOL = 1e-3
LOSS_RTOL_FP32 = 1e-4

# Bumped whenever write_snapshot's output changes, so a cached snapshot of an older recipe is not reused.
SNAPSHOT_VERSION = 2

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _fmix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _splitmix64(x):
    return _fmix64(x + _GOLDEN)


def synthetic_ids(seed, vocab, seq, first_sample, rows):
    """Token ids (rows, seq) of global samples [first_sample, first_sample + rows): exactly what
    lorabench's data.format = synthetic draws for them (labels = ids, every position carries loss)."""
    with np.errstate(over="ignore"):
        g = np.arange(first_sample, first_sample + rows, dtype=np.uint64)[:, None]
        key = _splitmix64(np.uint64(seed) ^ _splitmix64(g + np.uint64(0x5851F42D4C957F2D)))
        r = _splitmix64(key + np.arange(seq, dtype=np.uint64)[None, :])
    return (r % np.uint64(vocab)).astype(np.int64)


def first_sample(step, rank, micro_batch, world):
    """Global index of the first sample of rank's micro-batch at step (grad_accum 1; src/data/batch.hpp)."""
    return step * micro_batch * world + rank * micro_batch


def hf_config(preset):
    """config.json of a preset, the keys lorabench's hf_config_json writes (src/model/shape.cpp)."""
    vocab, hidden, inter, layers, heads, kv, tied = PRESETS[preset]
    if preset in QWEN3_HEAD_DIM:  # Qwen/Qwen3-0.6B's config.json keys (transformers' Qwen3Config)
        return {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                "head_dim": head_dim(preset), "hidden_act": "silu", "hidden_size": hidden, "initializer_range": 0.02,
                "intermediate_size": inter, "max_position_embeddings": 40960, "model_type": "qwen3",
                "num_attention_heads": heads, "num_hidden_layers": layers, "num_key_value_heads": kv,
                "rms_norm_eps": 1e-6, "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
                "tie_word_embeddings": tied, "torch_dtype": "bfloat16", "use_cache": False,
                "use_sliding_window": False, "vocab_size": vocab}
    return {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
            "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": inter,
            "max_position_embeddings": 32768, "model_type": "qwen2", "num_attention_heads": heads,
            "num_hidden_layers": layers, "num_key_value_heads": kv, "rms_norm_eps": 1e-6, "rope_scaling": None,
            "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": tied, "torch_dtype": "bfloat16",
            "use_cache": False, "use_sliding_window": False, "vocab_size": vocab}


def snapshot_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("LORABENCH_BENCH_MODELS", os.path.join(base, "lorabench", "bench-models"))


def write_snapshot(preset, seed, root=None):
    """The directory of a bf16 snapshot of preset with seeded random weights, written on first use.

    Weights are N(0, 0.02) like transformers' initialisation, with three changes that make the step-0
    check discriminating: biases (Qwen2) and norm weights (Qwen3's q/k norms too) are random too (zeros and ones would hide a side that
    drops or misplaces them), and the embedding (the tied head) has std 2.5/sqrt(hidden), so logits have
    a spread of ~2.5 and the loss of a token stream is its own (at std 0.02 every stream's loss is within
    1e-3 of ln(vocab))."""
    import torch
    from safetensors.torch import save_file

    path = os.path.join(root or snapshot_root(), f"{preset}-seed{seed}-v{SNAPSHOT_VERSION}")
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    vocab, hidden, inter, layers, heads, kv, tied = PRESETS[preset]
    hd = head_dim(preset)
    qwen3 = preset in QWEN3_HEAD_DIM
    g = torch.Generator().manual_seed(seed)

    def normal(*shape, mean=0.0, std=0.02):
        return torch.empty(shape, dtype=torch.float32).normal_(mean, std, generator=g).to(torch.bfloat16)

    head_std = 2.5 / hidden**0.5
    t = {"model.embed_tokens.weight": normal(vocab, hidden, std=head_std),
         "model.norm.weight": normal(hidden, mean=1.0, std=0.1)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = normal(hidden, mean=1.0, std=0.1)
        t[p + "post_attention_layernorm.weight"] = normal(hidden, mean=1.0, std=0.1)
        for name, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
            t[p + f"self_attn.{name}_proj.weight"] = normal(rows, hidden)
            if not qwen3:  # Qwen2 has q/k/v biases; Qwen3 has none, and per-head norms instead
                t[p + f"self_attn.{name}_proj.bias"] = normal(rows)
        if qwen3:
            t[p + "self_attn.q_norm.weight"] = normal(hd, mean=1.0, std=0.1)
            t[p + "self_attn.k_norm.weight"] = normal(hd, mean=1.0, std=0.1)
        t[p + "self_attn.o_proj.weight"] = normal(hidden, heads * hd)
        t[p + "mlp.gate_proj.weight"] = normal(inter, hidden)
        t[p + "mlp.up_proj.weight"] = normal(inter, hidden)
        t[p + "mlp.down_proj.weight"] = normal(hidden, inter)
    if not tied:
        t["lm_head.weight"] = normal(vocab, hidden, std=head_std)
    tmp = path + f".tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    save_file(t, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(hf_config(preset), f, indent=2)
    try:
        os.rename(tmp, path)  # atomic: a concurrent writer's complete copy or ours, never a partial one
    except OSError:
        if not os.path.exists(os.path.join(path, "model.safetensors")):
            raise
        shutil.rmtree(tmp)  # another process finished first: the same bytes
    return path


def loss_rtol(dtype):
    """The step-0 loss check's relative tolerance for the model dtype ("bf16" or "fp32")."""
    return LOSS_RTOL if dtype == "bf16" else LOSS_RTOL_FP32


def loss_matches(ours, peer, rtol=LOSS_RTOL):
    return abs(ours - peer) <= rtol * abs(ours)
