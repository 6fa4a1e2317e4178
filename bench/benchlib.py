"""Helpers shared by the benchmark scripts (run_bench.py, strategies.py)."""
import os
import re
import subprocess


def mpirun(n):
    """mpirun for n ranks on this machine: one core per rank, more ranks than cores allowed."""
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "core", "-n", str(n)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd


def h5dump_text(v):
    """h5dump prints each non-ASCII byte as a sign-extended octal escape (\\37777777716 for 0xCE)."""
    raw = re.sub(r"\\(3777777\d{4}|[0-7]{3})", lambda m: chr(int(m.group(1), 8) & 0xFF), v)
    return raw.encode("latin-1", "replace").decode("utf-8", "replace")


def summary(path):
    """Every attribute of a run file's /metrics/summary (one h5dump): numbers as floats, text as str."""
    p = subprocess.run(["h5dump", "-m", "%.17g", "-A", "-g", "/metrics/summary", path], stdout=subprocess.PIPE,
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
