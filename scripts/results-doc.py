#!/usr/bin/env python3
"""Writes docs/results.md from the evidence files under results/ (results/<machine family>/<UTC date>-<commit>
[-<tag>].json, written by bench/run_bench.py --evidence, bench/plan_validate.py --evidence,
bench/kernels_evidence.py --evidence, bench/mesh_2node.py --evidence and bench/hybrid_crossover.py --evidence
through bench/evidence.py): per machine family the newest evidence of each table, then the history. Plain python3.

    python3 scripts/results-doc.py            # rewrite docs/results.md
    python3 scripts/results-doc.py --check    # exit 1 when docs/results.md is not what it would write

Every number this script writes is an evidence file's number passed through one of FORMATS:
tests/docs/results_evidence_check.py relies on that to check each number of the page against the evidence.
"""
import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = "lorabench-evidence/1"  # bench/evidence.py's SCHEMA
NOTEBOOK = "51cfda9"  # the last commit whose docs/results.md was the hand-written lab notebook

# The only ways a figure is written on the page, by what it is.
FORMATS = {
    "seconds": lambda x: f"{x:.3f}",            # step times; also the planner's ratios
    "rate": lambda x: f"{x:.1f}",               # tokens/s, GFLOP/s, percentages stored as percent, GiB
    "whole": lambda x: f"{x:.0f}",              # MiB, counts, the host noise's GFLOP/s
    "ratio": lambda x: f"{x:.2f}",              # lorabench's speedup and memory ratio; the planner's spread
    "general": lambda x: f"{x:g}",              # tolerances
    "fraction_percent": lambda x: f"{100 * x:.1f}",   # a fraction shown in percent (the host noise's CV)
    "fraction_percent_whole": lambda x: f"{100 * x:.0f}",
    "bytes_mib": lambda x: f"{x / 2**20:.1f}",
    "loss": lambda x: f"{x:.6f}",               # a step's loss (the strategies of one model share step 0's)
}


def fmt(kind, x):
    return FORMATS[kind](x)


def load(results_dir, allow_quick=False):
    """Every evidence file under results_dir as (path, evidence), oldest first. A file that is not evidence
    of this schema, lies under another family's folder, or is a --quick run (the tiny shape that tests the
    flow; tests/docs/ keeps one as a fixture) stops the script: none is ever skipped quietly."""
    found = []
    for path in sorted(glob.glob(os.path.join(results_dir, "**", "*.json"), recursive=True)):
        with open(path) as f:
            try:
                ev = json.load(f)
            except json.JSONDecodeError as e:
                sys.exit(f"results-doc: {path}: not JSON ({e})")
        if not isinstance(ev, dict) or ev.get("schema") != SCHEMA:
            sys.exit(f"results-doc: {path}: not an evidence file of schema {SCHEMA} (bench/evidence.py)")
        family = ev["machine"]["family"]
        if os.path.basename(os.path.dirname(path)) != family:
            sys.exit(f"results-doc: {path}: its machine family is {family}, not its folder's")
        if ev.get("settings", {}).get("quick") and not allow_quick:
            sys.exit(f"results-doc: {path}: a --quick run tests the benchmark, it is not a result: remove it")
        found.append((path, ev))
    return sorted(found, key=lambda x: (x[1]["started_utc"], x[0]))


def link(path, out_dir):
    rel = os.path.relpath(path, out_dir).replace(os.sep, "/")
    return f"[{os.path.basename(path)}]({rel})"


def when(ev):
    """The date and the UTC times the evidence was measured in."""
    return f"{ev['started_utc'][:10]}, {ev['started_utc'][11:16]}-{ev['finished_utc'][11:16]} UTC"


def provenance(path, ev, out_dir):
    """The lines every table carries: when, commit, command, machine, host noise, the evidence file."""
    g, m = ev["git"], ev["machine"]
    dirty = f" with {g['dirty_paths_total']} changed paths (the evidence lists them)" if g["dirty"] else ""
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    machine = [m["cpu"], f"family `{m['family']}`", f"{m['cores']} CPUs"]
    machine += [f"{fmt('rate', m['memory_gib'])} GiB"] if m.get("memory_gib") else []
    machine += [m["os"], f"Linux {m['kernel']}"] + ([m["gpu"]] if m.get("gpu") else [])
    lines = [f"- measured {when(ev)}, commit `{g['short']}`{dirty}; evidence {link(path, out_dir)}",
             f"- command: `{ev['command']}`",
             f"- machine: {', '.join(machine)}; {versions}"
             + (f"; `{m['lorabench_version']}`" if m.get("lorabench_version") else "")]
    hn = ev["host_noise"]

    def quiet(n):
        return "quiet" if n["cv"] <= hn["quiet_cv"] else "NOT quiet"
    lines.append(f"- host noise (bench/host_noise.py; not quiet above a CV of "
                 f"{fmt('fraction_percent_whole', hn['quiet_cv'])}%): "
                 + "; ".join(f"{k} {fmt('whole', n['median_gflops'])} GFLOP/s, CV {fmt('fraction_percent', n['cv'])}% "
                             f"({quiet(n)})" for k, n in (("before", hn["before"]), ("after", hn["after"]))))
    return lines


def bench_section(path, ev, out_dir):
    s, t = ev["settings"], ev["table"]
    lines = provenance(path, ev, out_dir)
    lines.append(f"- {fmt('whole', s['rounds'])} rotating rounds of {fmt('whole', s['steps'])} measured steps after "
                 f"{fmt('whole', s['warmup'])} warm-up, medians; every side's step-0 loss equal to lorabench's within "
                 f"{fmt('general', s['loss_rtol'])} relative (VALID)")
    if s["lorabench_set"]:
        lines.append("- lorabench's side ran with keys beyond the workload's (--lorabench-set): "
                     + ", ".join(f"`{x}`" for x in s["lorabench_set"]))
    # The roofline columns where the evidence has them (tables measured before it have none).
    roofline = any(r.get("roofline_bound_s") is not None for r in t["rows"])
    extra_head = " roofline bound (s) | of the bound |" if roofline else ""
    lines += ["", f"| workload | side | ranks | step (s) | tokens/s | LoRA-MFU |{extra_head} {s['memory']} | "
                  "lorabench speedup | lorabench memory / side |",
              "| --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if roofline else "") + " --- | --- | --- |"]
    for r in t["rows"]:
        speedup = "" if r["speedup"] is None else fmt("ratio", r["speedup"]) + "x"
        mem_ratio = "" if r["mem_ratio"] is None else fmt("ratio", r["mem_ratio"])
        extra = ""
        if roofline:
            bound = ("" if r.get("roofline_bound_s") is None
                     else f"{fmt('seconds', r['roofline_bound_s'])} ({r['roofline_limit']})")
            achieved = "" if r.get("roofline_percent") is None else f"{fmt('rate', r['roofline_percent'])}%"
            extra = f" {bound} | {achieved} |"
        lines.append(f"| {r['workload']} | {r['label']} | {fmt('whole', r['ranks'])} | {fmt('seconds', r['step_s'])} | "
                     f"{fmt('rate', r['tokens_per_s'])} | {fmt('rate', r['mfu_percent'])}% |{extra} "
                     f"{fmt('whole', r['mem_mib'])} | {speedup} | {mem_ratio} |")
    lines.append("")
    if roofline:
        bws = sorted({(r["workload"], r["bandwidth_gbs"]) for r in t["rows"] if r.get("bandwidth_gbs") is not None})
        lines.append("- roofline bound: the compute phases' max(FLOPs / frame, bytes / bandwidth) per step from "
                     "lorabench's run files (docs/metrics.md), the same for every side; memory bandwidth measured "
                     "per rank with the workload's ranks at once: "
                     + ", ".join(f"{w} {fmt('rate', b)} GB/s" for w, b in bws))
    if t["ddp_scaling"]:
        lines.append("- DDP scaling (tokens/s on N ranks over N times one rank's): " + ", ".join(
            f"{x['label']} on {fmt('whole', x['ranks'])} ranks {fmt('rate', x['percent'])}%" for x in t["ddp_scaling"]))
    for f in t["frames"]:
        lines.append(f"- LoRA-MFU frame ({f['preset']}, seq {fmt('whole', f['seq'])}, micro-batch "
                     f"{fmt('whole', f['batch'])}): {fmt('rate', f['gflops'])} GFLOP/s per rank, each GEMM shape at "
                     f"its best over the measurements before, between and after the rounds (their spread "
                     f"{fmt('rate', f['spread_percent'])}%)")
    if s.get("deepspeed"):
        lines += deepspeed_lines(ev)
    return lines


def deepspeed_lines(ev):
    """scripts/bench.sh --deepspeed: bytes per step, the memory predicted before the run against measured, the
    targets, the ds_config of every DeepSpeed side."""
    t = ev["table"]
    lines = ["", "| workload | side | bytes / step (MiB) | counted by | predicted memory / rank (MiB) | predicted by | "
                 "predicted / measured |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in t["rows"]:
        b = "" if r.get("comm_bytes_per_step") is None else fmt("bytes_mib", r["comm_bytes_per_step"])
        p = "" if r.get("predicted_mem_mib") is None else fmt("whole", r["predicted_mem_mib"])
        q = "" if r.get("predicted_ratio") is None else fmt("ratio", r["predicted_ratio"])
        lines.append(f"| {r['workload']} | {r['label']} | {b} | {r['comm_counted_by']} | {p} | "
                     f"{r['predicted_by'] or ''} | {q} |")
    lines += ["", "- bytes / step: what rank 0 hands to the collectives per measured step (the send side; lorabench's "
                  "counters, DeepSpeed's comms logger). Predicted memory: lorabench's planner predicts the whole "
                  "resident set per rank; DeepSpeed's estimators the model states of every parameter, trainable or not "
                  "(device + host / ranks); both against the peak RSS measured"]
    for x in t.get("deepspeed_targets", []):
        verdict = lambda ok: "met" if ok else "MISSED"  # noqa: E731
        pred = ("" if x["prediction_met"] is None else
                f"; memory predicted off by {fmt('fraction_percent_whole', x['planner_error'])}% (lorabench's planner) "
                f"against {fmt('fraction_percent_whole', x['estimator_error'])}% (DeepSpeed's estimator): "
                f"{verdict(x['prediction_met'])}")
        lines.append(f"- target, {x['workload']}, lorabench against {x['side']}: tokens/s {fmt('ratio', x['speedup'])}x "
                     f"(>= {fmt('general', x['speedup_target'])}x: {verdict(x['speedup_met'])}), peak RSS per rank {fmt('ratio', x['mem_ratio'])}x "
                     f"(<= 1: {verdict(x['memory_met'])}){pred}")
    for w in ev["workloads"]:
        for side, runs in w["runs"].items():
            if runs and runs[0]["extra"].get("ds_config"):
                cfg = json.dumps(runs[0]["extra"]["ds_config"], separators=(",", ":"))
                lines.append(f"- ds_config of {runs[0]['side']} ({w['name']}): `{cfg}`")
    return lines


def plan_section(path, ev, out_dir):
    s, t = ev["settings"], ev["table"]
    p = t["passed"]
    lines = provenance(path, ev, out_dir)
    lines.append(f"- medians of {fmt('whole', s['repeats'])} runs per configuration, {fmt('whole', s['steps'])} "
                 "steps each; predicted: the run's own prediction at its start (run.predict)")
    lines.append(f"- memory within {fmt('fraction_percent_whole', s['memory_tolerance'])}%: "
                 f"{fmt('whole', p['memory'])}/{fmt('whole', p['configurations'])}; step time within "
                 f"{fmt('fraction_percent_whole', s['step_tolerance'])}%: {fmt('whole', p['step'])}/"
                 f"{fmt('whole', p['configurations'])} (single runs: {fmt('whole', p['single'])}/"
                 f"{fmt('whole', p['single_runs'])})")
    lines += ["", "| model | strategy | ranks | tensor peak / rank predicted (MiB) | measured (MiB) | ratio | "
                  "step predicted (s) | measured (s) | ratio | measured max / min |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in t["rows"]:
        lines.append(f"| {r['preset']} | {r['strategy']} | {fmt('whole', r['world'])} | "
                     f"{fmt('bytes_mib', r['mem_pred'])} | {fmt('bytes_mib', r['mem'])} | {fmt('seconds', r['mem_ratio'])} | "
                     f"{fmt('seconds', r['step_pred'])} | {fmt('seconds', r['step'])} | "
                     f"{fmt('seconds', r['step_ratio'])} | {fmt('ratio', r['spread'])} |")
    lines.append("")
    return lines


def kernels_section(path, ev, out_dir):
    s, t = ev["settings"], ev["table"]
    lines = provenance(path, ev, out_dir)
    lines.append(f"- {fmt('whole', s['rounds'])} runs of the tool, each the best of {fmt('whole', s['reps'])} per row, on one "
                 "core; medians over the runs, and the range of the runs' ratios; the tool checks that both sides "
                 "agree before it prints a row")
    lines += ["", "| operation | dtype | ATen replacement | fused (ms) | ATen (ms) | ATen / fused | range over runs |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in t["rows"]:
        lines.append(f"| {r['op']} | {r['dtype']} | {r['replacement']} | {fmt('seconds', r['fused_ms'])} | "
                     f"{fmt('seconds', r['aten_ms'])} | {fmt('ratio', r['ratio'])}x | {fmt('ratio', r['ratio_min'])}-"
                     f"{fmt('ratio', r['ratio_max'])}x |")
    lines.append("")
    lines += [f"- not run: {x}" for x in t["not_run"]]
    return lines


def table(header, rows):
    """A Markdown table between blank lines: the header, its rule and one line per row of formatted cells."""
    return (["", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
            + ["| " + " | ".join(cells) + " |" for cells in rows] + [""])


def mesh_section(path, ev, out_dir):
    s, t = ev["settings"], ev["table"]
    lines = provenance(path, ev, out_dir)
    lines.append(f"- {s['ranks']} ranks (`srun -N 2 -n 4`, one thread each) on the two-node namespace cluster, the link "
                 f"limited to {s['rate']} each way (`{s['link']}`); {fmt('whole', s['steps'])} steps, 1 warm-up; medians "
                 f"of {fmt('whole', s['repeats'])} run(s); bytes over the link: lbnet's counters on one node, received "
                 "and sent, over the whole run / steps")
    header = ["model", "strategy", "step (s)", "tokens/s", "MiB over the link / step", "peak tensor MiB / rank",
              "step time fsdp / this", "link bytes this / fsdp"]
    rows = [[r["preset"], r["strategy"], fmt("seconds", r["step"]), fmt("rate", r["tps"]),
             fmt("bytes_mib", r["link_per_step"]), fmt("bytes_mib", r["mem"]), fmt("ratio", r["speedup_vs_fsdp"]) + "x",
             fmt("seconds", r["link_vs_fsdp"])] for r in t["rows"]]
    if any("loss_first" in r for r in t["rows"]):  # evidence since tensor parallelism: the tp group's bytes, step-0 loss
        header[5:5] = ["MiB in the tp group / step"]
        header.append("step-0 loss")
        for row, r in zip(rows, t["rows"]):
            row[5:5] = [fmt("bytes_mib", r["tp_per_step"]) if r.get("tp_per_step") is not None else "-"]
            row.append(fmt("loss", r["loss_first"]) if r.get("loss_first") is not None else "-")
    return lines + table(header, rows)


def crossover_section(path, ev, out_dir):
    s, t = ev["settings"], ev["table"]
    lines = provenance(path, ev, out_dir)
    lines.append(f"- two models of {s['preset']}'s widths, {fmt('whole', s['layers'])} decoder layers each, all Gated "
                 f"DeltaNet (linear) or all gated full attention, the same MLP, a vocabulary of {fmt('whole', s['vocab'])}; "
                 f"lorabench, LoRA r{fmt('whole', s['lora_r'])} on every projection the layers have, {s['dtype']}, one "
                 f"rank and thread; median of {fmt('whole', s['steps'])} steps after {fmt('whole', s['warmup'])} "
                 "warm-up; tensor peak: lorabench's own count (mem_peak_bytes_max); RSS: the process's peak")
    header = ["T", "linear step (s)", "full step (s)", "full / linear", "linear tokens/s", "full tokens/s",
              "linear tensor peak (MiB)", "full tensor peak (MiB)", "linear RSS (MiB)", "full RSS (MiB)"]
    lines += table(header, [
        [fmt("whole", r["seq"]), fmt("seconds", r["linear_step"]), fmt("seconds", r["full_step"]),
         fmt("ratio", r["full_over_linear"]), fmt("rate", r["linear_tokens_per_s"]), fmt("rate", r["full_tokens_per_s"]),
         fmt("bytes_mib", r["linear_tensor_peak"]), fmt("bytes_mib", r["full_tensor_peak"]),
         fmt("whole", r["linear_rss_mib"]), fmt("whole", r["full_rss_mib"])] for r in t["rows"]])
    if t["crossover"] is None:
        lines.append(f"- crossover: none measured; full attention's step is the faster up to T = "
                     f"{fmt('whole', t['rows'][-1]['seq'])}")
    else:
        lines.append(f"- crossover: the linear layers' step is the faster from T = {fmt('whole', t['crossover'])}")
    return lines


SECTIONS = {"bench": bench_section, "plan-validate": plan_section, "kernels": kernels_section, "mesh": mesh_section,
            "crossover": crossover_section}

HEADER = """# Measured results

<!-- Generated by scripts/results-doc.py from the evidence files under results/. Do not edit: add evidence
and run `python3 scripts/results-doc.py` (docs/performance.md, "Recording evidence"). -->

This page is generated from the evidence files under [results/](../results/) by `python3
scripts/results-doc.py`; do not edit it. Each evidence file was written by the benchmark that measured it
and records the command, the commit, the machine, how quiet the machine was and every run (lorabench's
run files with their sha256). Per machine family (`bench/evidence.py`, `machine_family`) the newest
evidence of each table comes first; older evidence is under [History](#history). Compare ratios measured
in one run, not absolute figures across runs. How the benchmarks work and why the figures are what they
are: [performance.md](performance.md)."""

HISTORY_GIT = f"""Every earlier version of this page and of the evidence is in git:
`git log -p -- docs/results.md results/`. Until evidence files existed this page was a hand-written lab
notebook of measurements on the development VMs of 2026-12-01 to 2026-12-05 (an Intel Xeon with AMX, and
AMD EPYCs with and without AVX-512 BF16). No evidence file holds them; git keeps them:
`git show {NOTEBOOK}:docs/results.md`. What they found is explained in [performance.md](performance.md)
and [testing.md](testing.md)."""


def render(evidence, out_dir):
    """docs/results.md's text for the evidence (oldest first, as load() returns it)."""
    newest = {}  # (family, kind, title) -> (path, ev): the newest of each table
    for path, ev in evidence:
        newest[(ev["machine"]["family"], ev["kind"], ev["title"])] = (path, ev)
    shown = {p for p, _ in newest.values()}
    lines = [HEADER, ""]
    if not newest:
        lines += ["No evidence file is recorded yet. The commands that record one are in\n"
                  "[performance.md](performance.md#recording-evidence); the measurements made before evidence files\n"
                  "existed are in the history below.", ""]
    families = {}
    for key, (path, ev) in sorted(newest.items(), key=lambda kv: kv[1][1]["started_utc"], reverse=True):
        families.setdefault(key[0], []).append((path, ev))
    for family, tables in families.items():
        lines += [f"## {family}", ""]
        for path, ev in tables:
            if ev["kind"] not in SECTIONS:
                sys.exit(f"results-doc: {path}: no section for evidence of kind {ev['kind']!r}")
            lines += [f"### {ev['title']}", ""] + SECTIONS[ev["kind"]](path, ev, out_dir)
            if lines[-1]:
                lines.append("")
    lines += ["## History", ""]
    older = [(p, ev) for p, ev in reversed(evidence) if p not in shown]
    if older:
        lines += ["Older evidence files, newest first:", ""]
        lines += [f"- `{ev['machine']['family']}` {link(p, out_dir)}: {ev['title']}, commit `{ev['git']['short']}`"
                  for p, ev in older]
        lines.append("")
    lines.append(HISTORY_GIT)
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(ROOT, "results"), help="the evidence files' folder")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results.md"))
    ap.add_argument("--check", action="store_true", help="exit 1 when --out differs from what would be written")
    a = ap.parse_args()
    evidence = load(a.results)
    text = render(evidence, os.path.dirname(os.path.abspath(a.out)))
    if a.check:
        try:
            with open(a.out) as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current != text:
            sys.exit(f"results-doc: {a.out} is not what the evidence under {a.results} makes: run "
                     "python3 scripts/results-doc.py (and do not edit the page by hand)")
        return
    with open(a.out, "w") as f:
        f.write(text)
    print(f"results-doc: wrote {a.out} from {len(evidence)} evidence files")


if __name__ == "__main__":
    main()
