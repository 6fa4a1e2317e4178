#!/usr/bin/env bash
# The table of bad inputs, docs/bad-inputs.md: runs the real lorabench binary on each class of bad input
# in a scratch directory and records its exit code and first line of error output (the work directory
# and the host name normalised). Fails when the committed document differs from what the binary says now.
#   bad_inputs_e2e.sh LORABENCH SOURCE_DIR WORK_DIR            check docs/bad-inputs.md (ctest e2e_bad_inputs)
#   bad_inputs_e2e.sh LORABENCH SOURCE_DIR WORK_DIR --write    regenerate it
# e.g. tests/e2e/bad_inputs_e2e.sh build/src/app/lorabench . /tmp/lorabench-bad-inputs --write
set -euo pipefail
lorabench="$(realpath "$1")" src="$(realpath "$2")" work=$3 mode=${4:-check}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"
work="$(pwd -P)"
export OMP_NUM_THREADS=1
host="$(hostname)"

tiny=("$src/inputs/tiny.ini" --set run.output_dir=out --set run.quiet=true --set run.steps=2 --set run.warmup_steps=0)
rows=()

# tidy LINE: the line as the table shows it: no machine paths or host name, no tensor digests (they depend
# on the trained values), `|` escaped for Markdown.
tidy() {
  local line=$1
  line="${line//$work/WORK}"
  line="${line//$src/SRC}"
  line="${line//@$host]/@HOST]}"
  line="${line//|/\\|}"
  sed -E 's/\b[0-9a-f]{16}\b/DIGEST/g' <<<"$line"
}

# case CLASS WHAT CMD...: runs CMD, keeps exit code and the first line that says what went wrong.
case_() {
  local class=$1 what=$2
  shift 2
  local rc=0
  "$@" >out.txt 2>err.txt </dev/null || rc=$?
  local line
  # The first line that says it is an error; a line ending in ':' (a heading such as "configuration
  # error:") continues with the next line, which names the file, line and key.
  line="$(awk '/error|^lorabench[a-z -]*:/ && !found { found = 1; out = $0; if ($0 !~ /:$/) exit; next }
               found { sub(/^[ \t]+/, ""); out = out " " $0; if ($0 !~ /:$/) exit }
               END { print out }' err.txt)"
  # hwloc's own complaints (e.g. no /sys in a chroot) are not lorabench's answer to the bad input.
  [[ -n $line ]] || line="$(grep -v -e '^[[:space:]]*$' -e '^\[hwloc' err.txt | head -n1 || true)"
  [[ -n $line ]] || line="(nothing on stderr)"
  line="$(tidy "$line")"
  [[ $rc -ne 0 ]] || fail "$class: exit code 0 (a bad input must fail): $*"
  rows+=("| $class | $what | $rc | \`$line\` |")
}

# A valid run to take a checkpoint and an adapter from.
run 0 seed.log "$lorabench" "${tiny[@]}" --set run.name=seed --set checkpoint.every=2 --set lora.r=1 --set lora.targets=q
ckpt=out/seed/checkpoints/step_00000002.h5
snap=snapshot
mkdir -p $snap && cp "$src/tests/fixtures/qwen2-tiny/config.json" "$src/tests/fixtures/qwen2-tiny/model.safetensors" $snap/
tok="$src/tests/fuzz/corpus/tokenizer/qwen2.5-tiny.json"
data=(--set data.format=auto --set data.tokenizer="$tok" --set data.seq_len=16)
model=(--set model.path=$snap --set data.tokenizer="$tok")

# --- input file and command line
printf '[run]\nsteps = 3\nthis is not a key\n' >malformed.ini
case_ "malformed ini" "a line that is neither \`[section]\` nor \`key = value\`" "$lorabench" malformed.ini
printf '[train]\nlearning_rate = 1e-3\n' >unknown.ini
case_ "unknown key" "\`[train] learning_rate\` (the key is \`lr\`)" "$lorabench" unknown.ini
case_ "unknown --set key" "\`--set train.learningrate=1\`" "$lorabench" "${tiny[@]}" --set train.learningrate=1
case_ "out-of-range value" "\`--set lora.r=0\`" "$lorabench" "${tiny[@]}" --set lora.r=0
case_ "mistyped value" "\`--set train.lr=fast\`" "$lorabench" "${tiny[@]}" --set train.lr=fast
printf '[run]\nsteps = 2\nsteps = 3\n' >dup.ini
case_ "duplicate key" "\`steps\` twice in \`[run]\`" "$lorabench" dup.ini
case_ "missing input file" "\`lorabench missing.ini\`" "$lorabench" missing.ini
case_ "contradictory settings" "\`run.warmup_steps\` >= \`run.steps\`" "$lorabench" "${tiny[@]}" --set run.warmup_steps=5
case_ "sequence beyond the model" "\`data.seq_len\` above \`max_position_embeddings\` (the qwen2-tiny snapshot: 512)" "$lorabench" "${tiny[@]}" --set model.path="$src/tests/fixtures/qwen2-tiny" --set data.seq_len=513
case_ "LoRA rank beyond a layer" "\`lora.r=33\` with \`lora.targets=q,k\` on the tiny preset (k_proj 64 x 32)" "$lorabench" "${tiny[@]}" --set lora.r=33 --set lora.targets=q,k

# --- model files
mkdir -p trunc && cp $snap/config.json trunc/ && head -c 5000 $snap/model.safetensors >trunc/model.safetensors
case_ "truncated safetensors" "model.safetensors cut to 5000 bytes" "$lorabench" "${tiny[@]}" --set model.path=trunc --set data.tokenizer="$tok"
mkdir -p lying && cp $snap/config.json lying/
python3 - lying/model.safetensors <<'PY'
import struct, sys
h = b'{"model.embed_tokens.weight": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}'
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h)
PY
case_ "lying safetensors" "a shape of 2^64 elements over 0 bytes" "$lorabench" "${tiny[@]}" --set model.path=lying --set data.tokenizer="$tok"
mkdir -p hdr && cp $snap/config.json hdr/ && printf '\xff\xff\xff\xff\x00\x00\x00\x00{}' >hdr/model.safetensors
case_ "safetensors header length" "a header length beyond the file size" "$lorabench" "${tiny[@]}" --set model.path=hdr --set data.tokenizer="$tok"
mkdir -p badcfg && cp $snap/model.safetensors badcfg/ && sed 's/"tie_word_embeddings": [a-z]*/"tie_word_embeddings": "yes"/' $snap/config.json >badcfg/config.json
case_ "mistyped config.json" "\`\"tie_word_embeddings\": \"yes\"\`" "$lorabench" "${tiny[@]}" --set model.path=badcfg --set data.tokenizer="$tok"
mkdir -p zerocfg && cp $snap/model.safetensors zerocfg/ && sed 's/"num_attention_heads": [0-9]*/"num_attention_heads": 0/' $snap/config.json >zerocfg/config.json
case_ "impossible config.json" "\`\"num_attention_heads\": 0\`" "$lorabench" "${tiny[@]}" --set model.path=zerocfg --set data.tokenizer="$tok"
mkdir -p wrongshape && cp $snap/config.json wrongshape/ && python3 - $snap/model.safetensors wrongshape/model.safetensors <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
# swap the shapes of two tensors of equal size: the file stays valid, the model does not fit it
k = next(k for k, v in h.items() if k != "__metadata__" and len(v["shape"]) == 2 and v["shape"][0] != v["shape"][1])
h[k]["shape"] = h[k]["shape"][::-1]
hb = json.dumps(h).encode(); open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
case_ "weights that do not fit config.json" "one tensor's shape transposed" "$lorabench" "${tiny[@]}" --set model.path=wrongshape --set data.tokenizer="$tok"

# --- tokenizer and data
printf '{"model": ' >tok_trunc.json
case_ "truncated tokenizer.json" "\`{\"model\": \`" "$lorabench" "${tiny[@]}" --set data.format=auto --set data.path="$src/inputs/data/sft_toy.jsonl" --set data.tokenizer=tok_trunc.json
python3 - "$tok" <<'PY'
import json, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "(?|a|b)"}
open("tok_branch_reset.json", "w", encoding="utf-8").write(json.dumps(j))
j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "b*"}
j["added_tokens"][0]["lsrtip"] = j["added_tokens"][0].pop("lstrip")
open("tok_misspelled.json", "w", encoding="utf-8").write(json.dumps(j))
PY
case_ "tokenizer.json regex Oniguruma refuses" "a branch-reset group (PCRE2 takes it; Hugging Face refuses the file)" "$lorabench" "${tiny[@]}" --set data.format=auto --set data.path="$src/inputs/data/sft_toy.jsonl" --set data.tokenizer=tok_branch_reset.json
case_ "misspelled added-token field" "\`\"lsrtip\"\` for \`\"lstrip\"\`" "$lorabench" "${tiny[@]}" --set data.format=auto --set data.path="$src/inputs/data/sft_toy.jsonl" --set data.tokenizer=tok_misspelled.json
printf '{"instruction": "a", "output": "b"}\n{"instruction": "caf\xe9", "output": "c"}\n' >latin1.jsonl
case_ "non-UTF-8 JSONL" "a Latin-1 byte in record 2" "$lorabench" "${tiny[@]}" "${data[@]}" --set data.path=latin1.jsonl
printf '{"instruction": "a", "output": "b"}\n{"instruction": "a", "output": \n' >malformed.jsonl
case_ "malformed JSONL record" "record 2 cut short" "$lorabench" "${tiny[@]}" "${data[@]}" --set data.path=malformed.jsonl
printf '{"instruction": "a", "output": "b", "n": 1e999}\n' >bignum.jsonl
case_ "number beyond a double" "\`1e999\` in a record" "$lorabench" "${tiny[@]}" "${data[@]}" --set data.path=bignum.jsonl
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4", "reasoning_content": "2+2"}]}\n' >reasoning.jsonl
case_ "reasoning for the Qwen2.5 template" "an assistant's \`reasoning_content\` with the tiny (Qwen2.5) preset" "$lorabench" "${tiny[@]}" "${data[@]}" --set data.path=reasoning.jsonl
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "tool_calls": [{"name": "f"}]}]}\n' >toolcall.jsonl
case_ "tool call without arguments" "\`tool_calls: [{\"name\": \"f\"}]\` with \`data.chat_template=qwen3\`" "$lorabench" "${tiny[@]}" "${data[@]}" --set data.path=toolcall.jsonl --set data.chat_template=qwen3
printf '{"messages": [{"role": "user", "content": "hi"}]}\n' >noassistant.jsonl
case_ "chat without an answer" "no assistant message" "$lorabench" "${tiny[@]}" "${data[@]}" --set data.path=noassistant.jsonl
: >empty.jsonl
case_ "empty dataset" "a 0-byte JSONL file" "$lorabench" "${tiny[@]}" "${data[@]}" --set data.path=empty.jsonl
case_ "oversized sequence" "\`--set data.seq_len=4194304\`" "$lorabench" "${tiny[@]}" "${data[@]}" --set data.path="$src/inputs/data/sft_toy.jsonl" --set data.seq_len=4194304
case_ "nothing to train on" "every answer beyond \`data.seq_len\` (sft_toy at 16 tokens)" "$lorabench" "${tiny[@]}" "${data[@]}" --set data.path="$src/inputs/data/sft_toy.jsonl"

# --- outputs, checkpoints, adapters
: >a_file
case_ "unwritable output" "\`run.output_dir\` below a regular file" "$lorabench" "$src/inputs/tiny.ini" --set run.output_dir=a_file/out --set run.quiet=true
case_ "existing run" "the same \`run.name\` again without \`run.overwrite\`" "$lorabench" "${tiny[@]}" --set run.name=seed
# One flipped byte inside a tensor's stored values (found by its bytes, which h5dump writes out).
h5dump -d /trainable/base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight -b LE -o tensor.bin $ckpt >/dev/null
cp $ckpt corrupt.h5 && python3 - corrupt.h5 tensor.bin <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); t = open(sys.argv[2], "rb").read()
i = b.find(t); assert i > 0 and b.find(t, i + 1) < 0, "tensor bytes not found once"
b[i + len(t) // 2] ^= 0x40
open(sys.argv[1], "wb").write(bytes(b))
PY
case_ "corrupt checkpoint" "one flipped byte in a tensor's stored values (\`lorabench checkpoint info\`)" "$lorabench" checkpoint info corrupt.h5
case_ "corrupt checkpoint, resumed" "the same file given to \`checkpoint.resume\`" "$lorabench" "${tiny[@]}" --set run.name=t0 --set lora.r=1 --set lora.targets=q --set checkpoint.resume="$work/corrupt.h5"
head -c 10000 $ckpt >truncated.h5
case_ "truncated checkpoint" "a checkpoint cut to 10000 bytes, resumed from" "$lorabench" "${tiny[@]}" --set run.name=t1 --set lora.r=1 --set lora.targets=q --set checkpoint.resume="$work/truncated.h5"
printf 'not hdf5\n' >text.h5
case_ "not a checkpoint" "a text file given to \`checkpoint.resume\`" "$lorabench" "${tiny[@]}" --set run.name=t2 --set checkpoint.resume="$work/text.h5"
case_ "checkpoint of another run" "resume a r=1 checkpoint with \`lora.r=4\`" "$lorabench" "${tiny[@]}" --set run.name=t3 --set checkpoint.resume="$work/$ckpt"
case_ "mismatched adapter" "\`lora.init_from\` an r=1 adapter with \`lora.r=4\`" "$lorabench" "${tiny[@]}" --set run.name=t4 --set lora.init_from=out/seed/adapter
mkdir -p badadapter && cp out/seed/adapter/adapter_model.safetensors badadapter/ && sed 's/"r": 1/"r": "one"/' out/seed/adapter/adapter_config.json >badadapter/adapter_config.json
case_ "mistyped adapter_config.json" "\`\"r\": \"one\"\`" "$lorabench" "${tiny[@]}" --set run.name=t5 --set lora.init_from=badadapter

# warn_ CLASS WHAT CMD...: an input that is accepted (exit 0) with a warning: keeps the warning line.
warnings=()
warn_() {
  local class=$1 what=$2
  shift 2
  local rc=0
  "$@" >out.txt 2>err.txt </dev/null || rc=$?
  [[ $rc -eq 0 ]] || { cat err.txt >&2; fail "$class: exit code $rc (accepted with a warning, expected 0): $*"; }
  local line
  line="$(grep -m1 'warning:' err.txt || true)"
  [[ -n $line ]] || { cat err.txt >&2; fail "$class: no warning: $*"; }
  line="$(tidy "$line")"
  warnings+=("| $class | $what | \`$line\` |")
}
warn_ "a key in two --set" "\`--set train.lr=1e-3 --set train.lr=3e-4\`" "$lorabench" "${tiny[@]}" --set run.name=w1 --set train.lr=1e-3 --set train.lr=3e-4
warn_ "examples with nothing to train on" "some answers beyond \`data.seq_len\` (sft_toy at 128 tokens)" "$lorabench" "${tiny[@]}" --set data.format=auto --set data.tokenizer="$tok" --set run.name=w2 --set data.path="$src/inputs/data/sft_toy.jsonl" --set data.seq_len=128

{
  cat <<'MD'
# Bad inputs: what lorabench says

Generated by `tests/e2e/bad_inputs_e2e.sh` (ctest `e2e_bad_inputs`, label e2e), which runs the real
`lorabench` binary on each input below in a scratch directory and fails when this file differs from what
the binary prints now. Regenerate after changing a message:

```
tests/e2e/bad_inputs_e2e.sh build/src/app/lorabench . /tmp/lorabench-bad-inputs --write
```

The message is the first line of standard error that says what went wrong (with the line after it when
it is a heading ending in `:`); `WORK` is the scratch directory, `SRC` the checkout, `HOST` the host name,
`DIGEST` a tensor digest. Exit codes: 2 = a configuration error, or a file that makes the run impossible
as configured (one message from rank 0); 3 = a non-finite loss stopped training; 4 = a checkpoint or
run-file write failed (a full disk; every rank says so: [checkpoints.md](checkpoints.md#a-full-disk-a-failing-device));
75 = stopped by SIGTERM, SIGUSR1 or SIGINT (Ctrl-C) after a checkpoint ([checkpoints.md](checkpoints.md#preemption-and-time-limits));
1 = any other failure (`[rank r@host] error: ...`, then `MPI_Abort`, so no rank hangs); `lorabench
checkpoint` exits 2 when a file is unusable. The readers behind
these rows are also fuzzed ([testing.md](testing.md#fuzzing-the-readers)).

| class | input | exit | first error line |
| --- | --- | --- | --- |
MD
  printf '%s\n' "${rows[@]}"
  cat <<'MD'

## Accepted with a warning

Inputs that run as asked, with a warning on standard error (the first one is shown):

| class | input | warning |
| --- | --- | --- |
MD
  printf '%s\n' "${warnings[@]}"
} >bad-inputs.md

if [[ $mode == --write ]]; then
  cp bad-inputs.md "$src/docs/bad-inputs.md"
  echo "wrote $src/docs/bad-inputs.md (${#rows[@]} classes)"
else
  diff -u "$src/docs/bad-inputs.md" bad-inputs.md >doc.diff ||
    { cat doc.diff >&2; fail "docs/bad-inputs.md is out of date: regenerate it with tests/e2e/bad_inputs_e2e.sh LORABENCH SOURCE_DIR WORK_DIR --write"; }
  echo "docs/bad-inputs.md matches (${#rows[@]} classes)"
fi
