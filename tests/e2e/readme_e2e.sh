#!/usr/bin/env bash
# README's "Using it" block, run as a new user would: from an empty directory holding only the checkout's
# inputs/, with an installed lorabench (cmake --install into a fresh prefix) first on PATH.
#   readme_e2e.sh BUILD_DIR SOURCE_DIR WORKDIR MPIEXEC...
# Each command of the block runs as written, with two changes, both stated where they happen: training
# commands get --set run.steps=2 --set run.warmup_steps=0 appended, and all but the first also --set
# model.preset=tiny (the commands, paths and run names are the README's; the first trains the default 0.5B
# model as written, 50 s on an AVX2-only EPYC core, and the others the tiny one, where the 0.5B took 290 s
# for all of them), and srun/sbatch lines need a Slurm allocation (the slurm label runs those). Then the
# block's first two lines once more: both must run again, each into a new numbered directory, and the
# earlier runs must be untouched; an explicit run.name that is taken is refused.
set -euo pipefail
build=$1 src=$2 work=$3
shift 3
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"

cmake --install "$build" --prefix "$work/prefix" >install.log 2>&1 || { cat install.log >&2; fail "cmake --install"; }
for t in qwen2.5 qwen3; do
  [[ -f prefix/share/lorabench/$t/tokenizer.json ]] || fail "the $t tokenizer was not installed"
done
mkdir -p user/bin
ln -s "$src/inputs" user/inputs
# `lorabench` is the installed binary; training commands are shortened (see above; README_E2E_MODEL=default
# leaves the model as the input file has it).
cat >user/bin/lorabench <<WRAP
#!/usr/bin/env bash
tiny=(--set model.preset=tiny)
[[ \${README_E2E_MODEL:-} == default ]] && tiny=()
case "\${1:-}" in
  *.ini) exec "$work/prefix/bin/lorabench" "\$@" --set run.steps=2 --set run.warmup_steps=0 "\${tiny[@]}" ;;
  *) exec "$work/prefix/bin/lorabench" "\$@" ;;
esac
WRAP
# `mpirun` is the MPI launcher the build found, with the flags this machine needs (root, 2 cores).
printf '#!/usr/bin/env bash\nexec %s "$@"\n' "${mpiexec[*]}" >user/bin/mpirun
chmod +x user/bin/*
export PATH="$work/user/bin:$work/prefix/bin:$PATH"
cd user

# The block, exactly as README.md has it.
awk '/^## Using it/{f=1} f&&/^```/{n++; next} f&&n==1{print} n>=2{exit}' "$src/README.md" >block.txt
[[ -s block.txt ]] || fail "no \"Using it\" block in README.md"
grep -q '^lorabench inputs/' block.txt || fail "the README block has no training command"
i=0
while IFS= read -r line; do
  cmd="${line%%#*}"
  [[ -n "${cmd// /}" ]] || continue
  i=$((i + 1))
  case "$cmd" in
    srun* | sbatch*)
      echo "line $i needs a Slurm allocation (the slurm label runs it): $cmd"
      continue ;;
  esac
  echo "line $i: $cmd"
  model=tiny
  [[ $i == 1 ]] && model=default
  run 0 "line$i.log" env README_E2E_MODEL=$model bash -c "$cmd" </dev/null  # mpirun reads standard input
done <block.txt
[[ -f outputs/report.md ]] || fail "the block's report was not written"

# The first two lines again: new numbered runs, the first ones untouched.
sum() { sha256sum "$1" | cut -d' ' -f1; }
first=$(sum outputs/ddp-n1/run.h5)
second=$(sum outputs/ddp-n2/run.h5)
run 0 again1.log bash -c "$(sed -n 1p block.txt)" </dev/null
run 0 again2.log bash -c "$(sed -n 2p block.txt)" </dev/null
[[ -f outputs/ddp-n1-2/run.h5 && -f outputs/ddp-n2-2/run.h5 ]] || { ls outputs >&2; fail "no numbered second runs"; }
[[ $(sum outputs/ddp-n1/run.h5) == "$first" && $(sum outputs/ddp-n2/run.h5) == "$second" ]] ||
  fail "a second run changed the first run's file"
[[ $(h5attr outputs/ddp-n2-2/run.h5 /provenance/world_size) == 2 ]] || fail "ddp-n2-2 is not the 2-rank run"
# A name the user gave is theirs: taken means refused (exit 2), naming the directory; nothing replaced.
ga4=$(sum outputs/ddp_ga4/run.h5)
run 2 taken.log lorabench inputs/ddp.ini --set train.grad_accum=4 --set run.name=ddp_ga4
expect_in taken.log "run.name: $work/user/outputs/ddp_ga4 already exists"
[[ $(sum outputs/ddp_ga4/run.h5) == "$ga4" ]] || fail "a refused run changed the existing run"

# The installed binaries work from any directory: here, one with no inputs/ and no checkout.
mkdir -p "$work/elsewhere" && cd "$work/elsewhere"
run 0 version.txt lorabench --version
expect_re version.txt '^lorabench [0-9]+\.[0-9]+\.[0-9]+ \(commit '
run 0 tok.txt bash -c 'echo "Hello, world" | lorabench tokenize'
expect_in tok.txt "[9707,11,1879]"
# Qwen3's template with the installed Qwen3 tokenizer (<think> 151667, </think> 151668).
run 0 tok3.txt bash -c 'echo "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Yo\"}]" | lorabench tokenize --chat --chat-template qwen3'
expect_in tok3.txt "[151644,872,198,13048,151645,198,151644,77091,198,151667,271,151668,271,64725,151645,198]"
run 0 report.txt lorabench-report "$work/user/outputs/ddp-n2/run.h5" -o r.md
[[ -s r.md ]] || fail "lorabench-report wrote nothing"
echo "README block: $i commands, the repeated ones numbered, installed binaries usable from $work/elsewhere"
