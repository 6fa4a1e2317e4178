#!/usr/bin/env python3
"""Soak: a long 2-rank run of tiny steps with periodic checkpoints, watched from outside (issue 18, item 5).

The run: `lorabench` under mpirun with the 256-token Qwen2 fixture (tests/fixtures/qwen2-tiny), synthetic
data, STEPS steps, a checkpoint every EVERY steps keeping KEEP, a row flush every LOG steps. Every SAMPLE
seconds the script reads each rank's resident memory (VmRSS) and open file descriptors from /proc, the size
of run.h5, the number of checkpoint files, and the last step the progress lines reported.

What it reports (Markdown on stdout and in OUT/soak.md; every sample in OUT/samples.tsv):
  - RSS per rank: the least-squares slope against the step over the part after the first 10% of the steps
    (KiB per 1000 steps), and the drift that slope means over the whole run;
  - open file descriptors per rank after that warm-up: min, max, and the fewest in each quarter (a write holds
    files open for a moment; a leak raises that baseline);
  - checkpoints: the most present at any sample, and what is left at the end (KEEP files, no *.tmp);
  - run.h5: bytes per step (least squares against the step) and the largest deviation from that line.
Verdicts (each a line): RSS flat = |slope| x steps below 1% of the run's RSS; fds flat; checkpoints as
keep_last says; run.h5 linear = every sample within 2% (or 64 KiB) of the line. Exit 1 when one fails.

  python3 bench/soak.py --lorabench build/src/app/lorabench [--steps 20000] [--every 500] [--keep 3]
                        [--log-every 100] [--ranks 2] [--sample 0.5] [--out DIR]
"""
import argparse
import datetime
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(HERE, "bench"))
import benchlib  # noqa: E402


def fit(xs, ys):
    """Least squares y = a + b x: (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def proc_status(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def rank_pids(marker, exe):
    """The lorabench processes (not mpirun) whose command line contains `marker`, ordered by rank."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if not args or os.path.basename(args[0].decode(errors="replace")) != os.path.basename(exe):
            continue
        if marker.encode() not in b" ".join(args):
            continue
        rank = next((int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"OMPI_COMM_WORLD_RANK=")), 0)
        found.append((rank, int(d)))
    return [p for _, p in sorted(found)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lorabench", required=True)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--keep", type=int, default=3)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sample", type=float, default=0.5)
    ap.add_argument("--out", default=os.path.join(HERE, "outputs", "soak"))
    a = ap.parse_args()

    out = os.path.abspath(a.out)
    name = "soak_" + datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%S")
    run_dir = os.path.join(out, name)
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    os.makedirs(out, exist_ok=True)
    cmd = benchlib.mpirun(a.ranks) + [
        a.lorabench, os.path.join(HERE, "inputs", "tiny.ini"),
        "--set", "model.path=" + os.path.join(HERE, "tests", "fixtures", "qwen2-tiny"),
        "--set", "data.seq_len=16", "--set", "train.micro_batch=1", "--set", "parallel.strategy=ddp",
        "--set", f"run.steps={a.steps}", "--set", "run.warmup_steps=0", "--set", f"run.log_every={a.log_every}",
        "--set", f"checkpoint.every={a.every}", "--set", f"checkpoint.keep_last={a.keep}",
        "--set", "run.quiet=false", "--set", f"run.output_dir={out}", "--set", f"run.name={name}",
    ]
    print("soak: " + " ".join(cmd), file=sys.stderr)
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last_step = [0]
    log_lines = []

    def reader():
        for line in proc.stdout:
            log_lines.append(line)
            m = re.match(r"step (\d+)/", line)
            if m:
                last_step[0] = int(m.group(1))

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    pids = []
    while not pids and proc.poll() is None:
        time.sleep(0.1)
        pids = rank_pids("run.name=" + name, a.lorabench)
        if len(pids) < a.ranks:
            pids = []
    samples = []  # (t, step, [rss], [fds], run_h5_bytes, checkpoints, tmp files)
    max_ckpt = 0
    while proc.poll() is None:
        rss = [proc_status(p, "VmRSS") for p in pids]
        fds = [fd_count(p) for p in pids]
        try:
            size = os.path.getsize(os.path.join(run_dir, "run.h5"))
        except OSError:
            size = None
        try:
            files = os.listdir(ckpt_dir)
        except OSError:
            files = []
        n_ckpt = sum(1 for f in files if re.fullmatch(r"step_\d{8}\.h5", f))
        max_ckpt = max(max_ckpt, n_ckpt)
        if None not in rss and None not in fds and size is not None:
            samples.append((time.time() - t0, last_step[0], rss, fds, size, n_ckpt))
        time.sleep(a.sample)
    th.join(timeout=10)
    wall = time.time() - t0
    with open(os.path.join(out, name + ".log"), "w") as f:
        f.writelines(log_lines)
    if proc.returncode != 0:
        sys.stdout.write("".join(log_lines[-30:]))
        raise SystemExit(f"soak: the run failed with exit code {proc.returncode}")

    with open(os.path.join(out, name + ".samples.tsv"), "w") as f:
        f.write("t_s\tstep\t" + "\t".join(f"rss{r}_bytes" for r in range(a.ranks)) + "\t" +
                "\t".join(f"fds{r}" for r in range(a.ranks)) + "\trun_h5_bytes\tcheckpoints\n")
        for t, st, rss, fds, size, nc in samples:
            f.write(f"{t:.2f}\t{st}\t" + "\t".join(map(str, rss)) + "\t" + "\t".join(map(str, fds)) +
                    f"\t{size}\t{nc}\n")

    warm = [s for s in samples if s[1] >= a.steps // 10]
    if len(warm) < 10:
        raise SystemExit(f"soak: only {len(warm)} samples after the warm-up; lower --sample or raise --steps")
    steps = [s[1] for s in warm]
    lines, ok = [], True
    lines.append(f"| rank | RSS at 10% | RSS at end | slope (KiB / 1000 steps) | drift over {a.steps} steps | "
                 "open fds: min-max |")
    lines.append("| ---: | ---: | ---: | ---: | ---: | --- |")
    rss_flat = fds_flat = True
    for r in range(a.ranks):
        rss = [s[2][r] for s in warm]
        _, b = fit(steps, rss)
        drift = b * a.steps
        fds = [s[3][r] for s in warm]
        # A checkpoint or run-file write holds files open for a moment: a leak is a baseline that rises,
        # so compare the fewest open descriptors of each quarter of the samples.
        q = max(1, len(fds) // 4)
        base = [min(fds[i:i + q]) for i in range(0, len(fds) - q + 1, q)]
        rss_flat = rss_flat and abs(drift) < 0.01 * max(rss)
        fds_flat = fds_flat and min(base) == max(base)
        lines.append(f"| {r} | {rss[0] / 2**20:.1f} MiB | {rss[-1] / 2**20:.1f} MiB | {b * 1000 / 1024:+.2f} | "
                     f"{drift / 2**20:+.2f} MiB | {min(fds)}-{max(fds)}; baseline per quarter "
                     f"{'/'.join(map(str, base))} |")
    sizes = [s[4] for s in warm]
    a0, b0 = fit(steps, sizes)
    worst = max(abs(y - (a0 + b0 * x)) for x, y in zip(steps, sizes))
    worst_rel = max(abs(y - (a0 + b0 * x)) / y for x, y in zip(steps, sizes))
    linear = all(abs(y - (a0 + b0 * x)) <= max(0.02 * y, 65536) for x, y in zip(steps, sizes))
    final = sorted(os.listdir(ckpt_dir))
    kept = [f for f in final if re.fullmatch(r"step_\d{8}\.h5", f)]
    tmp = [f for f in final if f.endswith(".tmp")]
    want = [f"step_{s:08d}.h5" for s in range(a.steps - (a.keep - 1) * a.every, a.steps + 1, a.every)]
    ckpt_ok = kept == want and not tmp and max_ckpt <= a.keep
    final_size = os.path.getsize(os.path.join(run_dir, "run.h5"))
    summary = benchlib.summary(os.path.join(run_dir, "run.h5"))
    verdicts = [("RSS flat (|drift| < 1% of RSS on every rank)", rss_flat),
                ("open file descriptors flat on every rank (the fewest per quarter of the run equal)", fds_flat),
                (f"checkpoints: at most {a.keep} at any sample, {', '.join(want)} left, no .tmp", ckpt_ok),
                ("run.h5 linear in steps (every sample within 2% or 64 KiB of the line)", linear)]
    head = [
        f"Soak: {a.ranks} ranks x {a.steps} steps (ddp, Qwen2 fixture vocab 256, seq 16, micro-batch 1), "
        f"checkpoint every {a.every}, keep_last {a.keep}, rows flushed every {a.log_every} steps; "
        f"{len(samples)} samples every {a.sample} s, {wall:.0f} s wall, "
        f"{summary.get('step_time_median_s', float('nan')) * 1e3:.2f} ms median step.",
        "",
    ]
    tail = [
        "",
        f"run.h5: {b0:.1f} bytes per step (least squares), largest deviation {worst / 1024:.1f} KiB "
        f"({100 * worst_rel:.2f}%), {final_size / 2**20:.2f} MiB at the end.",
        f"Checkpoints: at most {max_ckpt} complete files at any sample; left at the end: {', '.join(kept)}"
        f"{'; .tmp: ' + ', '.join(tmp) if tmp else ''}.",
        "",
    ] + [f"- {'PASS' if v else 'FAIL'}: {t}" for t, v in verdicts]
    text = "\n".join(head + lines + tail) + "\n"
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    ok = all(v for _, v in verdicts)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
