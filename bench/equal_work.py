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
    "qwen3.5-tiny": (248320, 64, 96, 4, 4, 2, True),
    "qwen3.5-0.8b": (248320, 1024, 3584, 24, 8, 2, True),
}
# Qwen3 and Qwen3.5 presets: their head_dim (not hidden / heads); no q/k/v biases, per-head q_norm and k_norm.
QWEN3_HEAD_DIM = {"qwen3-tiny": 32, "qwen3-0.6b": 128, "qwen3.5-tiny": 32, "qwen3.5-0.8b": 256}
# Qwen3.5 presets (src/model/shape.cpp): the linear-attention layers' key heads, value heads and head size; every
# fourth layer is full attention (gated, a quarter of each head rotated), the others Gated DeltaNet.
QWEN3_5_LINEAR = {"qwen3.5-tiny": (2, 4, 16), "qwen3.5-0.8b": (16, 16, 128)}
QWEN3_5_CONV_KERNEL = 4
# LoRA targets of the benchmark, by peft's module names: the seven projections, and on Qwen3.5 also the linear
# layers' in_proj_qkv, in_proj_z, in_proj_b, in_proj_a and out_proj (inputs/qwen3_5.ini's set).
SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
QWEN3_5_LINEAR_TARGETS = ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]


def head_dim(preset):
    vocab, hidden, inter, layers, heads, kv, tied = PRESETS[preset]
    return QWEN3_HEAD_DIM.get(preset, hidden // heads)


def layer_types(preset):
    """Each decoder layer's kind, as config.json's layer_types names them."""
    layers = PRESETS[preset][3]
    if preset not in QWEN3_5_LINEAR:
        return ["full_attention"] * layers
    return ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]


def lora_targets(cfg, r):
    """The benchmark's LoRA targets of rank r under peft's names for a snapshot's config.json: the seven
    projections, on Qwen3.5 also the linear layers' five, except in_proj_b and in_proj_a where the model has fewer
    value heads than r (they map the hidden state to one value per head; lorabench refuses a rank above a
    projection's smaller dimension, and peft would train a rank-deficient update: Qwen3.5-tiny's 4 heads, never
    the public sizes' 16 or more)."""
    if cfg["model_type"] != "qwen3_5_text":
        return list(SEVEN)
    narrow = {"in_proj_b", "in_proj_a"} if cfg["linear_num_value_heads"] < r else set()
    return SEVEN + [t for t in QWEN3_5_LINEAR_TARGETS if t not in narrow]


def lorabench_targets(cfg, r):
    """The same targets under lorabench's lora.targets names (q, k, ..., down, in_proj_qkv, ...)."""
    return [t[:-len("_proj")] if t in SEVEN else t for t in lora_targets(cfg, r)]


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
    if preset in QWEN3_5_LINEAR:  # the text model of Qwen/Qwen3.5-0.8B (transformers' Qwen3_5TextConfig keys)
        k_heads, v_heads, lin_dim = QWEN3_5_LINEAR[preset]
        return {"architectures": ["Qwen3_5ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                "head_dim": head_dim(preset), "hidden_act": "silu", "hidden_size": hidden, "initializer_range": 0.02,
                "intermediate_size": inter, "layer_types": layer_types(preset),
                "linear_conv_kernel_dim": QWEN3_5_CONV_KERNEL, "linear_key_head_dim": lin_dim,
                "linear_num_key_heads": k_heads, "linear_num_value_heads": v_heads, "linear_value_head_dim": lin_dim,
                "max_position_embeddings": 262144, "model_type": "qwen3_5_text", "num_attention_heads": heads,
                "num_hidden_layers": layers, "num_key_value_heads": kv, "rms_norm_eps": 1e-6,
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
                "tie_word_embeddings": tied, "dtype": "bfloat16", "use_cache": False, "vocab_size": vocab}
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
    """The directory of a bf16 snapshot of preset with seeded random weights, written on first use
    (write_config_snapshot of the preset's hf_config)."""
    return write_config_snapshot(hf_config(preset), preset, seed, root)


def write_config_snapshot(cfg, name, seed, root=None):
    """The directory `<name>-seed<seed>-v<version>` of a bf16 snapshot of config.json `cfg` (Qwen2, Qwen3 or
    Qwen3.5's text model, hf_config's keys) with seeded random weights, written on first use.

    Weights are N(0, 0.02) like transformers' initialisation, with three changes that make the step-0
    check discriminating: biases (Qwen2) and norm weights (Qwen3's q/k norms too) are random too (zeros and ones would hide a side that
    drops or misplaces them), and the embedding (the tied head) has std 2.5/sqrt(hidden), so logits have
    a spread of ~2.5 and the loss of a token stream is its own (at std 0.02 every stream's loss is within
    1e-3 of ln(vocab)). Qwen3.5's norms are zero-centred ((1 + w) x), so theirs are drawn around 0, the gated
    norm's around 1; its linear layers' decay parameters as transformers initialises them (A from U(0, 16),
    dt_bias one) plus noise, the depthwise convolution at the spread of its default initialisation."""
    import torch
    from safetensors.torch import save_file

    path = os.path.join(root or snapshot_root(), f"{name}-seed{seed}-v{SNAPSHOT_VERSION}")
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    vocab, hidden, inter, heads = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
    kv, tied = cfg["num_key_value_heads"], cfg["tie_word_embeddings"]
    hd = cfg.get("head_dim", hidden // heads)
    qwen3 = cfg["model_type"] in ("qwen3", "qwen3_5_text")
    qwen3_5 = cfg["model_type"] == "qwen3_5_text"
    norm_mean = 0.0 if qwen3_5 else 1.0  # Qwen3.5's RMSNorms scale by (1 + w)
    g = torch.Generator().manual_seed(seed)

    def normal(*shape, mean=0.0, std=0.02):
        return torch.empty(shape, dtype=torch.float32).normal_(mean, std, generator=g).to(torch.bfloat16)

    def uniform(n, lo, hi):
        return torch.empty(n, dtype=torch.float32).uniform_(lo, hi, generator=g)

    head_std = 2.5 / hidden**0.5
    t = {"model.embed_tokens.weight": normal(vocab, hidden, std=head_std),
         "model.norm.weight": normal(hidden, mean=norm_mean, std=0.1)}
    for i, kind in enumerate(cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = normal(hidden, mean=norm_mean, std=0.1)
        t[p + "post_attention_layernorm.weight"] = normal(hidden, mean=norm_mean, std=0.1)
        if kind == "linear_attention":  # Gated DeltaNet (transformers' Qwen3_5GatedDeltaNet)
            k_heads, v_heads = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
            k_dim, dim = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
            conv_dim = 2 * k_heads * k_dim + v_heads * dim
            a = p + "linear_attn."
            t[a + "in_proj_qkv.weight"] = normal(conv_dim, hidden)
            t[a + "in_proj_z.weight"] = normal(v_heads * dim, hidden)
            t[a + "in_proj_b.weight"] = normal(v_heads, hidden)
            t[a + "in_proj_a.weight"] = normal(v_heads, hidden)
            t[a + "conv1d.weight"] = normal(conv_dim, 1, cfg["linear_conv_kernel_dim"], std=0.3)
            t[a + "A_log"] = uniform(v_heads, 0.5, 16.0).log().to(torch.bfloat16)
            t[a + "dt_bias"] = normal(v_heads, mean=1.0, std=0.1)
            t[a + "norm.weight"] = normal(dim, mean=1.0, std=0.1)
            t[a + "out_proj.weight"] = normal(hidden, v_heads * dim)
        else:
            # Qwen3.5's q_proj gives each head its query and its output gate
            q_rows = 2 * heads * hd if qwen3_5 else heads * hd
            for name, rows in (("q", q_rows), ("k", kv * hd), ("v", kv * hd)):
                t[p + f"self_attn.{name}_proj.weight"] = normal(rows, hidden)
                if not qwen3:  # Qwen2 has q/k/v biases; Qwen3 has none, and per-head norms instead
                    t[p + f"self_attn.{name}_proj.bias"] = normal(rows)
            if qwen3:
                t[p + "self_attn.q_norm.weight"] = normal(hd, mean=norm_mean, std=0.1)
                t[p + "self_attn.k_norm.weight"] = normal(hd, mean=norm_mean, std=0.1)
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
        json.dump(cfg, f, indent=2)
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
