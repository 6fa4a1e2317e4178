#!/usr/bin/env python3
"""The docs' figures against the evidence files (results/, bench/evidence.py; docs/performance.md, "Recording
evidence"). Fails when

  (a) docs/results.md is not what scripts/results-doc.py makes from results/;
  (b) a number in docs/results.md is in no evidence file, after the generator's FORMATS (dates, UTC times,
      commit hashes and links are not figures; nor is a number inside a word such as zen4 or 0.5b-bf16);
  (c) a speed, memory or accuracy figure in docs/performance.md (a number with x, %, tokens/s, s, ms, GiB,
      MiB, GB, GFLOP/s, TFLOP/s and the like, or one in e-notation) is in no evidence file, unless
      tests/docs/figures_not_measured.txt names the phrase it stands in as a setting, a threshold or a
      tolerance; an entry there that matches nothing fails too.

Then it shows that it can fail, on a page made from real evidence files (evidence-fixture/: a fixture, not a
result; written by bench/run_bench.py --quick --evidence tests/docs/evidence-fixture and bench/plan_validate.py
--presets small --worlds 1,2 --repeats 1 --steps 3 --evidence tests/docs/evidence-fixture, again when the
schema changes): one number of it changed must fail (a) and (b), and a figure added to performance.md must
fail (c).

    python3 tests/docs/results_evidence_check.py [--root DIR]    # DIR: a checkout (default: this one)
"""
import argparse
import importlib.util
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIGURE_DOCS = ["docs/performance.md"]  # checked by (c)


def load_generator(root):
    spec = importlib.util.spec_from_file_location("results_doc", os.path.join(root, "scripts", "results-doc.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


NUM = r"\d+(?:\.\d+)?(?:e[-+]?\d+)?"
# A number standing alone: not part of a word (zen4, bf16, 0.5b, AVX-512, x86-64) or of a version (2.14.1).
NUMBER = re.compile(rf"(?<![\w.])(?<!\w-){NUM}(?!\w|\.\d)")
NOT_FIGURES = [re.compile(p) for p in (
    r"\[[^\]]*\]\([^)]*\)",                              # links: their text names a file or a page
    r"\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2})?Z?)?",  # dates
    r"\d{2}:\d{2}(?::\d{2})?(?:-\d{2}:\d{2})?",          # UTC times
    r"\S*/\S*[A-Za-z]\S*",                               # paths (and units such as GFLOP/s, which hold no digit)
)]
UNIT = (r"(?:(x)(?!\w)|\s?(%|tokens/s|tok/s|[GT]FLOP/s|[GMK]i?B/s|GiB|MiB|KiB|GB|MB|KB|ms|µs|us|ns|s|seconds?|"
        r"minutes?|min|hours?)(?![\w/]))")
# A speed, memory or accuracy figure: a number or range (1.2-1.3x, 2 to 3 s) with a unit, or e-notation.
FIGURE = re.compile(rf"(?<![\w./])(?<!\w-)({NUM})(?:\s?(?:-|–|to|and|or|/)\s?({NUM}))?{UNIT}"
                    rf"|(?<![\w.])(?<!\w-)(\d+(?:\.\d+)?e[-+]?\d+)(?!\w)")


def squeeze(text):
    return re.sub(r"\s+", " ", text)


def numbers(text):
    """The numbers of a text that are figures (above)."""
    for p in NOT_FIGURES:
        text = p.sub(" ", text)
    return NUMBER.findall(text)


def evidence_numbers(evidence, formats):
    """Every number an evidence file can show, as the generator writes it: each numeric value through each of
    its formats, and the numbers inside its texts (a command's --rounds 3)."""
    found = set()

    def walk(x):
        if isinstance(x, bool) or x is None:
            return
        if isinstance(x, (int, float)):
            for f in formats:
                found.update(numbers(f(x)))
        elif isinstance(x, str):
            found.update(numbers(x))
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    for _, ev in evidence:
        walk(ev)
    return found


def check_generated(gen, evidence, doc_path, text):
    """(a): the page is the generator's."""
    want = gen.render(evidence, os.path.dirname(doc_path))
    if text == want:
        return []
    have, expect = text.splitlines(), want.splitlines()
    line = next((i for i, (x, y) in enumerate(zip(have, expect)) if x != y), min(len(have), len(expect)))
    return [f"{doc_path}: not what scripts/results-doc.py makes from the evidence (first difference at line "
            f"{line + 1}); run python3 scripts/results-doc.py, never edit the page"]


def check_numbers(doc_path, text, known):
    """(b): every number of the page is in some evidence file."""
    missing = list(dict.fromkeys(n for n in numbers(text) if n not in known))
    return [f"{doc_path}: in no evidence file: {', '.join(missing[:20])}"
            + (", ..." if len(missing) > 20 else "")] if missing else []


def read_exemptions(path):
    """figures_not_measured.txt: FILE | phrase | why, one per line."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = [p.strip() for p in line.split("|")]
            if len(parts) != 3 or not all(parts):
                sys.exit(f"{path}:{i}: expected 'FILE | phrase | why it is not a measurement'")
            out.append((parts[0], squeeze(parts[1]), i))
    return out


def check_figures(doc, text, known, exemptions, exemptions_path):
    """(c): every speed, memory or accuracy figure of a page is in an evidence file, or in an exempt phrase."""
    text = squeeze(re.sub(r"\]\([^)]*\)", "]", text))  # link targets are paths
    spans, problems = [], []
    for file, phrase, line in exemptions:
        if file != doc:
            continue
        at = [m.span() for m in re.finditer(re.escape(phrase), text)]
        if not at:
            problems.append(f"{exemptions_path}:{line}: '{phrase}' is not in {doc} (remove the entry)")
        spans += at
    for m in FIGURE.finditer(text):
        if any(a <= m.start() and m.end() <= b for a, b in spans):
            continue
        nums = [n for n in m.groups()[:2] + m.groups()[4:] if n and re.fullmatch(NUM, n)]
        if any(n not in known for n in nums):
            context = text[max(0, m.start() - 40):m.end() + 20]
            problems.append(f"{doc}: '{m.group(0)}' is in no evidence file (... {context} ...)")
    return problems


def check(root, gen, evidence, results_text, figure_texts, exemptions, exemptions_path):
    doc_path = os.path.join(root, "docs", "results.md")
    known = evidence_numbers(evidence, gen.FORMATS.values())
    problems = check_generated(gen, evidence, doc_path, results_text)
    problems += check_numbers(doc_path, results_text, known)
    for doc, text in figure_texts.items():
        problems += check_figures(doc, text, known, exemptions, exemptions_path)
    return problems


def self_test(root, gen, figure_texts, exemptions, exemptions_path):
    """The checks must fail on a changed number and on an added figure: a page made from the fixture."""
    fixture = gen.load(os.path.join(HERE, "evidence-fixture"), allow_quick=True)
    if not fixture:
        return ["tests/docs/evidence-fixture/ holds no evidence file"]
    doc_path = os.path.join(root, "docs", "results.md")
    page = gen.render(fixture, os.path.dirname(doc_path))
    known = evidence_numbers(fixture, gen.FORMATS.values())
    problems = [f"fixture page: {p}" for p in check_numbers(doc_path, page, known)]
    # Change one figure of a table by one in its last digit (to a number the evidence cannot show), as a hand
    # edit would.
    rows = [line for line in page.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    edits = ((row, n, n[:-1] + str((int(n[-1]) + 1) % 10)) for row in rows for n in numbers(row) if f" {n} " in row)
    row, n, changed = next(((r, n, c) for r, n, c in edits if c not in known), (None, None, None))
    if row is None:
        return problems + ["fixture page: no table figure to change"]
    edited = page.replace(row, row.replace(f" {n} ", f" {changed} ", 1), 1)
    if not check_generated(gen, fixture, doc_path, edited):
        problems.append(f"self-test: (a) passed a page with {n} changed to {changed}")
    if not check_numbers("results.md", edited, known):
        problems.append(f"self-test: (b) passed a page with {n} changed to {changed}")
    for doc, text in figure_texts.items():
        added = text + "\nThe step took 9.87654 s, 1.98765x the peer's.\n"
        found = check_figures(doc, added, known, exemptions, exemptions_path)
        if len(found) != len(check_figures(doc, text, known, exemptions, exemptions_path)) + 2:
            problems.append(f"self-test: (c) did not flag both figures added to {doc}")
    if not problems:
        print(f"self-test: a page made from the fixture passes; {n} changed to {changed} fails (a) and (b); "
              "two figures added to each checked page fail (c)")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=ROOT, help="the checkout whose docs and results/ are checked")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    gen = load_generator(root)
    evidence = gen.load(os.path.join(root, "results"))
    with open(os.path.join(root, "docs", "results.md")) as f:
        results_text = f.read()
    figure_texts = {}
    for doc in FIGURE_DOCS:
        with open(os.path.join(root, doc)) as f:
            figure_texts[doc] = f.read()
    exemptions_path = os.path.join(HERE, "figures_not_measured.txt")
    exemptions = read_exemptions(exemptions_path)
    problems = check(root, gen, evidence, results_text, figure_texts, exemptions, exemptions_path)
    problems += self_test(root, gen, figure_texts, exemptions, exemptions_path)
    for p in problems:
        print("FAIL: " + p)
    if problems:
        print("A figure of a checked page comes from an evidence file (docs/performance.md, \"Recording evidence\"), "
              "or is reworded; tests/docs/figures_not_measured.txt names those that are not measurements.")
        return 1
    print(f"docs/results.md is generated from {len(evidence)} evidence files and every number in it is in one; "
          f"every figure of {', '.join(FIGURE_DOCS)} is in an evidence file or named as not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
