"""Helpers shared by the benchmark scripts (run_bench.py, strategies.py, frame.py, host_noise.py and the CPU
micro-benchmarks)."""
import json
import os
import re
import subprocess
import sys
import time


def measure_isolated(cmd, env, check=True):
    """Runs cmd from a fresh python child and returns (stdout, stderr, peak RSS in MiB): ru_maxrss of a
    process's children is the maximum over every descendant it waited for, and only grows, so each
    measured command gets its own helper process. With check=False a failing command returns its exit
    code as a fourth value instead of stopping the benchmark."""
    helper = [sys.executable, "-c",
              "import json,resource,subprocess,sys;"
              "p=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE,text=True);"
              "print(json.dumps({'rc':p.returncode,'out':p.stdout,'err':p.stderr,"
              "'rss':resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024.0}))"] + cmd
    p = subprocess.run(helper, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"bench: helper failed ({p.returncode})")
    r = json.loads(p.stdout)
    if not check:
        return r["out"], r["err"], r["rss"], r["rc"]
    if r["rc"] != 0:
        sys.stderr.write(r["out"] + r["err"])
        raise SystemExit(f"bench: command failed ({r['rc']}): {' '.join(cmd)}")
    return r["out"], r["err"], r["rss"]


def mpirun(n, device="cpu"):
    """mpirun for n ranks on this machine: on CPUs one core per rank (as the peers pin theirs), more ranks
    than cores allowed; on a GPU unbound, as the peers there run (a rank's host thread shares its core with
    the CUDA driver's and NCCL's threads when bound to one)."""
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "core" if device == "cpu" else "none", "-n", str(n)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd


def h5dump_text(v):
    """h5dump prints each non-ASCII byte as a sign-extended octal escape (\\37777777716 for 0xCE)."""
    raw = re.sub(r"\\(3777777\d{4}|[0-7]{3})", lambda m: chr(int(m.group(1), 8) & 0xFF), v)
    return raw.encode("latin-1", "replace").decode("utf-8", "replace")


def summary(path, group="/metrics/summary"):
    """Every attribute of a run file's /metrics/summary, or of another group (one h5dump): numbers as floats,
    text as str."""
    p = subprocess.run(["h5dump", "-m", "%.17g", "-A", "-g", group, path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench: h5dump cannot read {path}: {p.stderr.strip()}")
    vals, name = {}, None
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith('ATTRIBUTE "'):
            name = line.split('"')[1]
        elif line.startswith("(0):") and name:
            v = h5dump_text(line[4:].strip().strip('"'))
            try:
                vals[name] = float(v)
            except ValueError:
                vals[name] = v
            name = None
    return vals


def torch_python():
    """The Python of the libtorch venv (scripts/torch-venv.sh), which has torch; this one if it has it too."""
    try:
        import torch  # noqa: F401
        return sys.executable
    except ImportError:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        venv = subprocess.run([os.path.join(root, "scripts", "torch-venv.sh")], stdout=subprocess.PIPE, text=True,
                              check=True).stdout.strip()
        return os.path.join(venv, "bin", "python")


# The AVX-512 subsets libtorch 2.14 requires before it runs a bf16 GEMM with oneDNN on a CPU.
AVX512_GEMM_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})


def cpu_bf16_gemm_native(cpuinfo="/proc/cpuinfo"):
    """Whether libtorch runs bf16 GEMMs on this CPU with oneDNN: only with AVX-512 F, BW, VL and DQ. Elsewhere
    (an AVX2-only AMD EPYC) it runs its reference loops, 7-90x slower than fp32 on one core, and lorabench
    runs each bf16 GEMM as an fp32 GEMM on inputs widened from bf16 (src/model/gemm.cpp, the same test of
    the CPU's features). Without /proc/cpuinfo (not Linux): True."""
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        return True
    return flags is None or AVX512_GEMM_FLAGS <= set(flags)


def cpu_gemm_dtype(torch):
    """The dtype a bf16 GEMM really runs in on this CPU: bfloat16 (oneDNN) or float32 (widened; above)."""
    return torch.bfloat16 if cpu_bf16_gemm_native() else torch.float32


QUIET_CV = 0.05  # host_noise.py's CV above which the machine's own speed moves more than a frame may (5%)


def host_noise(seconds, device="cpu", env=None):
    """bench/host_noise.py's measurement (is the machine quiet?) as a dict, with 'line' describing it."""
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([torch_python(), os.path.join(here, "host_noise.py"), "--seconds", str(seconds),
                        "--device", device], env=env, stdout=subprocess.PIPE, text=True, check=True)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    verdict = "quiet" if r["cv"] <= QUIET_CV else "NOT quiet: timings taken on it move with the host"
    r["line"] = (f"{r['median_gflops']:.0f} GFLOP/s ({r.get('gemm', 'bf16')}), "
                 f"median of {r['windows']} windows of {r['window_s']:g} s "
                 f"(range {r['min_gflops']:.0f}-{r['max_gflops']:.0f}, CV {100 * r['cv']:.1f}%): {verdict}")
    return r


def pin_to_first_core():
    """Keep this process on the first core it may use, where mpirun --bind-to core puts rank 0."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def best_times(fns, rounds, min_sample_s, sync=lambda: None):
    """Best seconds per call of each of fns, timed interleaved: each fn is called once to warm up (kernel
    selection, first touch) and once more to size its sample (enough calls for >= min_sample_s); then
    `rounds` rounds time one sample of every fn in turn, so that a slow spell of the machine hits all of
    them alike. sync() is called before each clock read (on a GPU, torch.cuda.synchronize)."""
    reps = []
    for fn in fns:
        fn()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        reps.append(max(1, int(min_sample_s / max(time.perf_counter() - t0, 1e-6))))
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            sync()
            t0 = time.perf_counter()
            for _ in range(reps[i]):
                fn()
            sync()
            best[i] = min(best[i], (time.perf_counter() - t0) / reps[i])
    return best
