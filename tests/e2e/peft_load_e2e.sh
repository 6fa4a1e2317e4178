#!/usr/bin/env bash
# The adapter lorabench exports loads in PEFT and gives lorabench's logits: for each tiny snapshot (Qwen2,
# Qwen3 tied with head_dim 32, Qwen3 untied, Qwen3.5's hybrid tied and untied), lorabench trains a LoRA adapter for
# 3 steps (r 4 on all seven projections, and Qwen3.5's linear-attention ones; rsLoRA on one), `lorabench forward` writes the model + adapter's logits, and transformers +
# peft (the benchmark's pinned peers) load the snapshot with PeftModel.from_pretrained(adapter dir) and
# compute theirs on the same ids in fp64: lorabench's fp32 logits equal them within 1e-5 of the largest logit, or
# within twice transformers' own fp32 error where that is larger (Qwen3.5's chunked delta rule in fp32 is 1.8e-5 to
# 2e-5 of the largest logit from fp64 in transformers itself, by CPU), while the base model alone does not.
#   peft_load_e2e.sh PYTHON LORABENCH SOURCE_DIR WORKDIR
set -euo pipefail
py=$1 lorabench=$2 src=$3 work=$4
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"
export OMP_NUM_THREADS=1

ids="5,17,100,3,99,42,7,127,1,64,120;9,9,31,77,80,2,11,0,125,8,100"  # below 128: the Qwen3.5 fixtures' vocabulary
all7=q,k,v,o,gate,up,down
cases=()
for spec in "qwen2-tiny:false:$all7" "qwen3-tiny:true:$all7" "qwen3-tiny-untied:false:$all7" \
    "qwen3.5-tiny:false:$all7,in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,out_proj" \
    "qwen3.5-tiny-untied:true:q,v,down,in_proj_qkv,in_proj_z,out_proj"; do
  IFS=: read -r snap rslora targets <<<"$spec"
  run 0 "train-$snap.log" "$lorabench" "$src/inputs/tiny.ini" --set model.path="$src/tests/fixtures/$snap" \
    --set run.output_dir=out --set run.name="$snap" --set run.steps=3 --set run.warmup_steps=0 --set train.lr=0.05 \
    --set data.seq_len=32 --set lora.r=4 --set lora.alpha=8 --set lora.rslora="$rslora" \
    --set lora.targets="$targets" --set run.quiet=true
  [[ -f "out/$snap/adapter/adapter_model.safetensors" ]] || fail "no adapter in out/$snap/adapter"
  run 0 "forward-$snap.log" "$lorabench" forward --model "$src/tests/fixtures/$snap" --adapter "out/$snap/adapter" \
    --ids "$ids" --out "ours-$snap.safetensors"
  cases+=("$src/tests/fixtures/$snap" "out/$snap/adapter" "ours-$snap.safetensors")
done

"$py" - "$ids" "${cases[@]}" <<'PY'
import sys
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

ids = torch.tensor([[int(x) for x in row.split(",")] for row in sys.argv[1].split(";")])
args = sys.argv[2:]
for snap, adapter, ours_file in zip(args[0::3], args[1::3], args[2::3]):
    # peft's model in fp64, the exact values, and in fp32: how far fp32 itself is from them in transformers. For
    # the Qwen3.5 models (the chunked delta rule's triangular solves and scan) that is 1.8e-5 to 2.0e-5 of the
    # largest logit, and lorabench's fp32 0.8e-5 (AVX2 EPYC) to 2.6e-5 (Zen 4, AVX-512) with the adapter trained
    # there: the bound is 1e-5 or twice transformers' own fp32 error, whichever is larger.
    logits = {}
    for dtype in (torch.float64, torch.float32):
        base = AutoModelForCausalLM.from_pretrained(snap, dtype=dtype, attn_implementation="eager")
        if dtype == torch.float64:
            with torch.no_grad():
                base_logits = base(ids).logits
        model = PeftModel.from_pretrained(base, adapter).eval().to(dtype)
        with torch.no_grad():
            logits[dtype] = model(ids).logits.to(torch.float64)
    theirs = logits[torch.float64]
    ours = load_file(ours_file)["logits"].to(torch.float64)
    scale = theirs.abs().max().item()
    diff = (ours - theirs).abs().max().item() / scale
    hf_fp32 = (logits[torch.float32] - theirs).abs().max().item() / scale
    bound = max(1e-5, 2 * hf_fp32)
    moved = (theirs - base_logits).abs().max().item()
    name = type(model.base_model.model).__name__
    print(f"{snap.rsplit('/', 1)[-1]} ({name}): |lorabench - peft| / max|logit| = {diff:.2e} (max|logit| {scale:.2f}; "
          f"transformers' fp32 {hf_fp32:.2e}, bound {bound:.2e}), |adapter - base| = {moved:.2e}")
    if not diff <= bound:
        sys.exit(f"FAIL: {adapter} in peft differs from lorabench by {diff:.3e} of the largest logit (bound {bound:.1e})")
    if not moved > 1e-3:
        sys.exit(f"FAIL: {adapter} barely changes the logits ({moved:.3e}): the check would not see a wrong load")
PY
echo "ok: the exported adapters load in peft and give lorabench's logits"
