#!/bin/sh
# tokenize_check.sh LORABENCH TOKENIZER_JSON: `lorabench tokenize` in its three modes, Qwen3's chat template
# with the bundled Qwen3 tokenizer (found without --tokenizer), and bad lines and flags.
set -u
bin="$1"
tok="$2"
fail=0
check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then echo "ok: $1"; else printf 'FAIL: %s\n  expected: %s\n  got:      %s\n' "$1" "$2" "$3"; fail=1; fi
}
if [ ! -f "$tok" ]; then
  echo "FAIL: $tok is missing: run scripts/install-deps.sh"
  exit 1
fi
out=$(printf 'Hello world\n"\\u4f60\\u597d\\uff0c\\u4e16\\u754c\\uff01"\n' | "$bin" tokenize --tokenizer "$tok")
check "text" "$(printf '[9707,1879]\n[108386,3837,99489,6313]')" "$out"
out=$(printf '[{"role":"user","content":"Hi!"},{"role":"assistant","content":"Hello world"}]\n' |
      "$bin" tokenize --tokenizer "$tok" --chat)
check "chat" "[151644,8948,198,2610,525,1207,16948,11,3465,553,54364,14817,13,1446,525,264,10950,17847,13,151645,198,151644,872,198,13048,0,151645,198,151644,77091,198,9707,1879,151645,198]" "$out"
out=$(printf '[9707,1879,151645]\n' | "$bin" tokenize --tokenizer "$tok" --decode)
check "decode" '"Hello world<|im_end|>"' "$out"
# Qwen3: the reasoning of the final answer is trained; the history's is gone; --no-thinking keeps the empty
# think block out of the trained part. <think> = 151667, </think> = 151668; the ids as Hugging Face tokenizers
# gives them for the same rendering.
q3='{"messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":"<think>old</think>A1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"A2","reasoning_content":"R"}]}'
out=$(printf '%s\n' "$q3" | "$bin" tokenize --chat --chat-template qwen3 --render)
check "qwen3 render" '{"text":"<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</think>\n\nA2<|im_end|>\n","trained":["A1<|im_end|>","<think>\nR\n</think>\n\nA2<|im_end|>"]}' "$out"
out=$(printf '%s\n' "$q3" | "$bin" tokenize --chat --chat-template qwen3 --no-thinking --render)
check "qwen3 render, no thinking" '{"text":"<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA2<|im_end|>\n","trained":["A1<|im_end|>","A2<|im_end|>"]}' "$out"
out=$(printf '[{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo","reasoning_content":"x"}]\n' |
      "$bin" tokenize --chat --chat-template qwen3)
check "qwen3 ids" "[151644,872,198,13048,151645,198,151644,77091,198,151667,198,87,198,151668,271,64725,151645,198]" "$out"
err=$(printf '%s\n' "$q3" | "$bin" tokenize --chat --no-thinking 2>&1 >/dev/null)
rc=$?
check "--no-thinking without qwen3: exit code" "2" "$rc"
case "$err" in *"--no-thinking needs --chat-template qwen3"*) echo "ok: --no-thinking refused" ;; *) echo "FAIL: --no-thinking message: $err"; fail=1 ;; esac
err=$(printf '[{"role":"assistant","content":"x","reasoning_content":"r"}]\n' | "$bin" tokenize --tokenizer "$tok" --chat 2>&1 >/dev/null)
rc=$?
check "reasoning_content under qwen2.5: exit code" "2" "$rc"
case "$err" in *"stdin:1: messages[0]: field 'reasoning_content' is rendered by the qwen3 chat template only"*) echo "ok: reasoning_content refused under qwen2.5" ;; *) echo "FAIL: reasoning_content message: $err"; fail=1 ;; esac
err=$(printf '[1]\nnot json\n' | "$bin" tokenize --tokenizer "$tok" --decode 2>&1 >/dev/null)
rc=$?
check "bad line exit code" "2" "$rc"
case "$err" in *"stdin:2:"*) echo "ok: bad line names stdin:2" ;; *) echo "FAIL: bad line message: $err"; fail=1 ;; esac
exit $fail
