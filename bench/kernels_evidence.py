#!/usr/bin/env python3
"""lorabench's fused CPU kernels against ATen (build/bench/lorabench-kernels-vs-aten) as an evidence file:
the tool run --rounds times on one core (OMP_NUM_THREADS=1, pinned to the first allowed core), each run
the best of --reps per row, and per row the medians over the rounds with the range of the ratio; the host
noise before and after. The tool itself checks that both sides agree before it prints a row.

    bench/kernels_evidence.py [--rounds 3] [--reps 30] [--evidence results] [--out FILE.md]

--evidence DIR writes results/<family>/<date>-<commit>-kernels.json (bench/evidence.py), from which
scripts/results-doc.py writes its table in docs/results.md.
"""
import argparse
import os
import statistics
import subprocess
import sys

import evidence
from benchlib import QUIET_CV, host_noise

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_rows(text):
    """The tool's Markdown rows as dicts; rows it did not run (no timing) are returned apart."""
    rows, not_run = [], []
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("| operation") or line.startswith("| ---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        try:
            fused, aten = float(cells[3]), float(cells[4])
        except (IndexError, ValueError):
            not_run.append(" ".join(c for c in cells if c))
            continue
        rows.append({"op": cells[0], "dtype": cells[1], "replacement": cells[2], "fused_ms": fused, "aten_ms": aten,
                     "max_rel_diff": float(cells[6])})
    return rows, not_run


def run_tool(binary, reps):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    core = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    p = subprocess.run([binary, "--reps", str(reps)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, preexec_fn=pin)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"kernels_evidence: {binary} failed ({p.returncode})")
    return p.stdout


def summarise(rounds):
    """Per row (op, dtype, replacement): median fused and ATen times over the rounds, the ratio of the
    medians and the range of the per-round ratios."""
    table = []
    for i, first in enumerate(rounds[0]):
        same = [r[i] for r in rounds]
        if any((x["op"], x["dtype"], x["replacement"]) != (first["op"], first["dtype"], first["replacement"])
               for x in same):
            raise SystemExit("kernels_evidence: the rounds printed different rows")
        ratios = [x["aten_ms"] / x["fused_ms"] for x in same]
        fused = statistics.median(x["fused_ms"] for x in same)
        aten = statistics.median(x["aten_ms"] for x in same)
        table.append({"op": first["op"], "dtype": first["dtype"], "replacement": first["replacement"],
                      "fused_ms": fused, "aten_ms": aten, "ratio": aten / fused, "ratio_min": min(ratios),
                      "ratio_max": max(ratios), "max_rel_diff": max(x["max_rel_diff"] for x in same)})
    return table


def markdown(table):
    lines = ["| operation | dtype | ATen replacement | fused (ms) | ATen (ms) | ATen / fused | range over rounds |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in table:
        lines.append(f"| {r['op']} | {r['dtype']} | {r['replacement']} | {r['fused_ms']:.3f} | {r['aten_ms']:.3f} | "
                     f"{r['ratio']:.2f}x | {r['ratio_min']:.2f}-{r['ratio_max']:.2f}x |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bench", "lorabench-kernels-vs-aten"))
    ap.add_argument("--lorabench", default=os.path.join(ROOT, "build", "src", "app", "lorabench"),
                    help="its --version names the build in the evidence")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30, help="the tool's best-of count per row and round")
    ap.add_argument("--evidence", default=None, metavar="DIR")
    ap.add_argument("--out", default=None, help="also write the Markdown table here")
    a = ap.parse_args()
    if a.rounds < 1 or a.reps < 1:
        ap.error("--rounds and --reps take positive integers")
    started = evidence.utc_now()
    noise_before = host_noise(2.0)
    rounds, not_run = [], []
    for _ in range(a.rounds):
        rows, not_run = parse_rows(run_tool(a.bin, a.reps))
        rounds.append(rows)
    noise_after = host_noise(2.0)
    table = summarise(rounds)
    text = markdown(table)
    print(f"host noise before: {noise_before['line']}\nhost noise after: {noise_after['line']}")
    print(f"{a.rounds} rounds of `lorabench-kernels-vs-aten --reps {a.reps}` on one core, medians\n\n{text}")
    for x in not_run:
        print(f"- not run: {x}")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    if a.evidence:
        machine = evidence.machine_description(a.lorabench if os.path.exists(a.lorabench) else None)
        title = "lorabench's fused CPU kernels against ATen, one core (lorabench-kernels-vs-aten)"
        body = {"settings": {"rounds": a.rounds, "reps": a.reps, "threads": 1, "bin": a.bin},
                "valid": True, "table": {"rows": table, "not_run": not_run}, "rounds": rounds}
        noise = {"before": noise_before, "after": noise_after, "quiet_cv": QUIET_CV}
        print("evidence:", evidence.write(a.evidence, "kernels", title, started, machine, noise, body, "kernels"))


if __name__ == "__main__":
    main()
