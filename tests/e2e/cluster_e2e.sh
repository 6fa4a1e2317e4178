#!/usr/bin/env bash
# End-to-end checks of the multi-node layout and of the user-facing inputs (tests/e2e/cluster.cmake).
#   cluster_e2e.sh CASE LORABENCH WORKDIR MPIEXEC...
# Cases:
#   emulated_nodes  4 ranks as 2 emulated nodes (DDP, tiny): /ranks has node 0,0,1,1 and local_rank
#                   0,1,0,1, provenance node_count 2 and nodes_emulated true, one startup line per rank
#   inputs          inputs/{single,ddp,fsdp,zero,qwen3}.ini are valid at the rank counts the slurm/ scripts use
#                   and say what docs/slurm.md promises (qwen2.5-0.5b, bf16, seq 256, LoRA r16/a32 x 7, ...);
#                   inputs/qwen3_sft.ini also trains 2 steps on qwen3-tiny (Qwen3's chat template)
set -euo pipefail
case_name=$1 lorabench=$2 work=$3
shift 3
mpiexec=("$@")
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"

case "$case_name" in
  emulated_nodes)
    "${mpiexec[@]}" -n 4 "$lorabench" "$src/inputs/tiny.ini" --set parallel.strategy=ddp \
      --set parallel.emulate_nodes=2 --set run.steps=2 --set run.warmup_steps=0 --set run.name=emu >out.txt 2>&1 ||
      { cat out.txt >&2; fail "lorabench failed"; }
    run=outputs/emu/run.h5
    [ "$(h5attr $run /status)" = completed ] || fail "status $(h5attr $run /status)"
    v=$(ranks_column $run rank); [ "$v" = 0,1,2,3 ] || fail "/ranks rank = $v"
    v=$(ranks_column $run node); [ "$v" = 0,0,1,1 ] || fail "/ranks node = $v, expected 0,0,1,1"
    v=$(ranks_column $run local_rank); [ "$v" = 0,1,0,1 ] || fail "/ranks local_rank = $v, expected 0,1,0,1"
    v=$(ranks_column $run cuda_device); [ "$v" = -1,-1,-1,-1 ] || fail "/ranks cuda_device = $v (CPU run)"
    v=$(h5attr $run /provenance/node_count); [ "$v" = 2 ] || fail "provenance node_count = $v, expected 2"
    v=$(h5attr $run /provenance/nodes_emulated); [ "$v" = true ] || fail "provenance nodes_emulated = $v"
    v=$(h5attr $run /provenance/world_size); [ "$v" = 4 ] || fail "provenance world_size = $v"
    for r in 0:0:0 1:0:1 2:1:0 3:1:1; do   # rank:node:local rank, one startup line each
      IFS=: read -r rk nd lr <<<"$r"
      grep -qE "rank $rk/4 host [^ ]+ node $nd/2 \(emulated\) local rank $lr/2 device cpu" out.txt ||
        { cat out.txt >&2; fail "no startup line for rank $rk as node $nd local rank $lr"; }
    done
    echo "ok: /ranks node 0,0,1,1 local_rank 0,1,0,1; node_count 2 (emulated)"
    ;;
  inputs)
    for x in single:1:single:qwen2.5-0.5b ddp:2:ddp:qwen2.5-0.5b fsdp:2:fsdp:qwen2.5-0.5b zero:2:zero2:qwen2.5-0.5b \
             qwen3:2:fsdp:qwen3-0.6b; do
      IFS=: read -r name n strategy preset <<<"$x"
      "${mpiexec[@]}" -n "$n" "$lorabench" "$src/inputs/$name.ini" --print-config >"$name.txt" 2>&1 ||
        { cat "$name.txt" >&2; fail "inputs/$name.ini is not valid at $n rank(s)"; }
      for kv in "parallel.strategy $strategy" "model.preset $preset" "model.dtype bf16" \
                "data.seq_len 256" "data.format synthetic" "train.micro_batch 1" "lora.r 16" "lora.alpha 32" \
                "lora.targets q,k,v,o,gate,up,down" "run.steps 20" "run.warmup_steps 2"; do
        grep -qE "^${kv% *} +${kv#* } " "$name.txt" || { cat "$name.txt" >&2; fail "inputs/$name.ini: ${kv% *} is not ${kv#* }"; }
      done
    done
    # inputs/qwen3_sft.ini (slurm/qwen3_sft_2gpu.sbatch's): Qwen3-0.6B on the bundled examples with Qwen3's
    # template in its non-thinking mode; valid at 2 ranks, and its data path trains for 2 steps on qwen3-tiny.
    "${mpiexec[@]}" -n 2 "$lorabench" "$src/inputs/qwen3_sft.ini" --print-config >qwen3_sft.txt 2>&1 ||
      { cat qwen3_sft.txt >&2; fail "inputs/qwen3_sft.ini is not valid at 2 ranks"; }
    for kv in "parallel.strategy fsdp" "model.preset qwen3-0.6b" "model.dtype bf16" "data.format auto" \
              "data.path inputs/data/sft_toy.jsonl" "data.chat_template auto" "data.enable_thinking false" \
              "data.pack true" "data.seq_len 512" "lora.r 16"; do
      grep -qE "^${kv% *} +${kv#* } " qwen3_sft.txt || { cat qwen3_sft.txt >&2; fail "inputs/qwen3_sft.ini: ${kv% *} is not ${kv#* }"; }
    done
    # inputs/qwen3_5.ini: Qwen3.5-0.8B's hybrid layers with adapters on every projection of both kinds; valid at
    # 2 ranks, and it trains for 2 steps on qwen3.5-tiny.
    "${mpiexec[@]}" -n 2 "$lorabench" "$src/inputs/qwen3_5.ini" --print-config >qwen3_5.txt 2>&1 ||
      { cat qwen3_5.txt >&2; fail "inputs/qwen3_5.ini is not valid at 2 ranks"; }
    for kv in "parallel.strategy fsdp" "model.preset qwen3.5-0.8b" "model.dtype bf16" "data.format synthetic" \
              "lora.targets q,k,v,o,gate,up,down,in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,out_proj" "lora.r 16"; do
      grep -qE "^${kv% *} +${kv#* } " qwen3_5.txt || { cat qwen3_5.txt >&2; fail "inputs/qwen3_5.ini: ${kv% *} is not ${kv#* }"; }
    done
    ln -s "$src/inputs" inputs
    "${mpiexec[@]}" -n 2 "$lorabench" inputs/qwen3_5.ini --set model.preset=qwen3.5-tiny --set lora.r=4 \
      --set run.steps=2 --set run.warmup_steps=0 --set run.name=qwen3_5 --set run.quiet=false >qwen3_5.log 2>&1 ||
      { cat qwen3_5.log >&2; fail "inputs/qwen3_5.ini did not train on qwen3.5-tiny"; }
    expect_in qwen3_5.log "3 linear-attention + 1 full-attention layers"
    "${mpiexec[@]}" -n 2 "$lorabench" inputs/qwen3_sft.ini --set model.preset=qwen3-tiny --set model.dtype=fp32 \
      --set run.steps=2 --set run.warmup_steps=0 --set run.name=qwen3_sft --set run.quiet=false >qwen3_sft.log 2>&1 ||
      { cat qwen3_sft.log >&2; fail "inputs/qwen3_sft.ini did not train on qwen3-tiny"; }
    expect_in qwen3_sft.log "chat template qwen3 (thinking off)"
    expect_in qwen3_sft.log "qwen3/tokenizer.json"
    echo "ok: inputs/single.ini, ddp.ini, fsdp.ini, zero.ini, qwen3.ini, qwen3_sft.ini, qwen3_5.ini"
    ;;
  *) fail "unknown case $case_name" ;;
esac
