"""Evidence files: what a benchmark run measured, with what it needs to be believed (docs/performance.md,
"Recording evidence"). bench/run_bench.py --evidence DIR and bench/plan_validate.py --evidence DIR write

    DIR/<machine family>/<UTC date>-<short commit>[-<tag>].json

holding the schema version, the exact command, the git commit (and whether the tree was dirty), the UTC
date, the machine, bench/host_noise.py's figure measured before the runs (and after), every run's
measurements, the figures its table shows, and for every lorabench run file its sha256 and
/metrics/summary attributes. scripts/results-doc.py turns the files under results/ into docs/results.md;
tests/docs/results_evidence_check.py fails when a figure there is in no evidence file. Only these tools
write evidence: a number typed in by hand is not evidence.
"""
import datetime
import hashlib
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys

from benchlib import AVX512_GEMM_FLAGS, summary

SCHEMA = "lorabench-evidence/1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpuinfo_fields(cpuinfo="/proc/cpuinfo"):
    """The first processor's model name, vendor, family number and flags from /proc/cpuinfo ({} elsewhere)."""
    fields = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break  # the first processor's block ends at its first blank line
                    continue
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        return {}
    return {"cpu": fields.get("model name", "unknown"), "vendor": fields.get("vendor_id", ""),
            "cpu_family": int(fields["cpu family"]) if fields.get("cpu family", "").isdigit() else None,
            "cpu_model": int(fields["model"]) if fields.get("model", "").isdigit() else None,
            "flags": fields.get("flags", "").split()}


def machine_family(flags, vendor="", cpu_family=None, gpu=None, machine=None):
    """The family an evidence file is filed under: machines whose tables compare, because the step's GEMMs
    (most of it) take the same route through libtorch at about the same rate. From /proc/cpuinfo:

        gpu-<name>  a GPU run (--device cuda): the GPU's name, lower case, non-alphanumerics as '-'
        amx-xeon    Intel with AMX-BF16: oneDNN's bf16 GEMMs on AMX tiles
        zen4        AMD family 25 with AVX-512 BF16 (Zen 4): oneDNN's AVX-512 BF16 GEMMs
        zen5        AMD family 26 with AVX-512 BF16 (Zen 5)
        avx512      any other CPU with AVX-512 F, BW, VL and DQ: libtorch's oneDNN bf16 route
        avx2        AVX2 and FMA without that AVX-512: libtorch's bf16 GEMM is its reference loops, and
                    lorabench widens bf16 to fp32 (docs/performance.md, "bf16 on CPUs without AVX-512")
        <machine>   anything else: platform.machine() (x86_64, aarch64)
    """
    if gpu:
        return "gpu-" + re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    flags = set(flags)
    if "amx_bf16" in flags:
        return "amx-xeon"
    if vendor == "AuthenticAMD" and "avx512_bf16" in flags and cpu_family in (25, 26):
        return "zen4" if cpu_family == 25 else "zen5"
    if AVX512_GEMM_FLAGS <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return machine or platform.machine() or "unknown"


def git_state():
    """The checkout's commit, and the paths that differ from it (tracked or not ignored): a dirty tree
    means the figures may come from code that no commit holds."""
    def git(*a):
        p = subprocess.run(["git", "-C", ROOT, *a], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return p.stdout if p.returncode == 0 else None
    commit = (git("rev-parse", "HEAD") or "").strip()
    if not commit:
        return {"commit": "unknown", "short": "nogit", "dirty": None, "dirty_paths": []}
    paths = [line[3:] for line in (git("status", "--porcelain") or "").splitlines()]
    return {"commit": commit, "short": commit[:7], "dirty": bool(paths), "dirty_paths": paths[:40],
            "dirty_paths_total": len(paths)}


def machine_description(lorabench=None, versions=None, gpu=None):
    """The machine facts an evidence file carries: CPU, family (machine_family), cores, memory, kernel, OS,
    the Python packages' versions and lorabench's --version."""
    c = cpuinfo_fields()
    memory_gib = None
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
        memory_gib = kb / 2**20
    except (OSError, StopIteration, ValueError):
        pass
    os_name = platform.system()
    try:
        with open("/etc/os-release") as f:
            os_name = next((line.split("=", 1)[1].strip().strip('"') for line in f if line.startswith("PRETTY_NAME=")),
                           os_name)
    except OSError:
        pass
    version = None
    if lorabench:
        p = subprocess.run([lorabench, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        version = p.stdout.strip() or None
    flags = c.get("flags", [])
    return {"family": machine_family(flags, c.get("vendor", ""), c.get("cpu_family"), gpu),
            "cpu": c.get("cpu", platform.processor() or "unknown"), "vendor": c.get("vendor", ""),
            "cpu_family": c.get("cpu_family"), "cpu_model": c.get("cpu_model"),
            "isa": " ".join(x for x in flags if x.startswith(("avx", "amx")) or x == "fma"),
            "cores": os.cpu_count(), "memory_gib": memory_gib, "kernel": platform.release(), "os": os_name,
            "gpu": gpu, "versions": versions or {}, "lorabench_version": version}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_file_record(path, keys=None):
    """A lorabench run file as evidence: its path, sha256 and /metrics/summary attributes (all of them, or
    only `keys`, where many runs would make the file large), read with h5dump (benchlib.summary)."""
    s = summary(path)
    if keys is not None:
        s = {k: s[k] for k in keys if k in s}
    return {"path": os.path.abspath(path), "sha256": sha256(path), "summary": s}


def command_line():
    """What was typed: scripts/bench.sh's command line when it started this process (it exports
    LORABENCH_BENCH_COMMAND), else this script's."""
    typed = os.environ.get("LORABENCH_BENCH_COMMAND")
    if typed:
        return typed.strip()
    script = os.path.relpath(os.path.abspath(sys.argv[0]), os.getcwd())
    return shlex.join([script] + sys.argv[1:])


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def finite(x):
    """x with every NaN or infinity replaced by None: strict JSON, which the stdlib generator reads."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def portable(x):
    """x with this machine's paths named as the repository does: the checkout as <checkout>, the home
    directory as ~ (an evidence file is committed; the machine it ran on is described in "machine")."""
    if isinstance(x, str):
        x = x.replace(ROOT, "<checkout>")
        home = os.path.expanduser("~")
        return x.replace(home + os.sep, "~" + os.sep) if home not in ("", os.sep) else x
    if isinstance(x, dict):
        return {k: portable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [portable(v) for v in x]
    return x


def write(directory, kind, title, started_utc, machine, host_noise, body, tag=""):
    """Writes one evidence file under directory/<family>/ and returns its path. kind names the table
    (bench, plan-validate), title heads it in docs/results.md and tells which evidence files are the same
    table (the newest of each is shown); body holds the tool's settings, runs and figures. A second file of
    the same day, commit and tag gets -2, -3, ..."""
    git = git_state()
    doc = {"schema": SCHEMA, "kind": kind, "title": title, "command": command_line(), "argv": sys.argv,
           "cwd": os.getcwd(), "git": git, "started_utc": started_utc, "finished_utc": utc_now(),
           "machine": machine, "host_noise": host_noise, **body}
    folder = os.path.join(directory, machine["family"])
    os.makedirs(folder, exist_ok=True)
    stem = f"{started_utc[:10]}-{git['short']}" + (f"-{tag}" if tag else "")
    path, n = os.path.join(folder, stem + ".json"), 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(folder, f"{stem}-{n}.json")
    with open(path + ".part", "w") as f:
        json.dump(portable(finite(doc)), f, allow_nan=False)  # one line: a full table stays within tens of KB
        f.write("\n")
    os.replace(path + ".part", path)
    return path
