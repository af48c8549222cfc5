#!/usr/bin/env python3
"""ONNX backend node-test conformance with a ratcheting allowlist.

Fetches the ONNX 1.19.1 backend test data from the onnx==1.19.1 wheel on PyPI (pip download,
only onnx/backend/test/data/node is unpacked, cached; nothing is installed), runs every node case
through `ferrolite check --atol 1e-5 --rtol 1e-3`, and

* fails when a case in tests/conformance/allowlist.txt fails (the ratchet),
* with --update, adds newly passing cases to the allowlist (it only grows),
* regenerates docs/conformance.md (counts by op type, failing cases and why),
* prints `N passed, M failed`.

Standard library only.
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ONNX_VERSION = "1.19.1"
ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "tests" / "conformance" / "allowlist.txt"
REPORT = ROOT / "docs" / "conformance.md"
ATOL, RTOL = "1e-5", "1e-3"


# The node cases, and the older suites that keep legacy opsets honest (models converted from
# PyTorch at opsets 6-9, and small whole models); the latter are named `suite/case`.
SUITES = ["node", "pytorch-converted", "pytorch-operator", "simple"]


def fetch_suite(cache: Path, suite: str) -> Path:
    suite_dir = cache / f"onnx-{ONNX_VERSION}" / suite
    if suite_dir.is_dir() and any(suite_dir.iterdir()):
        return suite_dir
    wheel_dir = cache / "wheel"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheels = list(wheel_dir.glob(f"onnx-{ONNX_VERSION}-*.whl"))
    if not wheels:
        print(f"downloading the onnx=={ONNX_VERSION} wheel (test data only, not installed)", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "-d", str(wheel_dir), f"onnx=={ONNX_VERSION}"],
            check=True,
        )
        wheels = list(wheel_dir.glob(f"onnx-{ONNX_VERSION}-*.whl"))
    prefix = f"onnx/backend/test/data/{suite}/"
    tmp = cache / f"onnx-{ONNX_VERSION}-{suite}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheels[0]) as z:
        for member in z.namelist():
            if member.startswith(prefix) and not member.endswith("/"):
                target = tmp / member[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(member))
    suite_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(suite_dir)
    return suite_dir


def fetch_node_tests(cache: Path) -> Path:
    """The node cases' folder (scripts/fuzz-corpus reads it too)."""
    return fetch_suite(cache, "node")


def run_check(binary: Path, cases: list) -> list:
    """Runs `ferrolite check` over the cases; reruns smaller batches if the process dies."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        proc = subprocess.run(
            [str(binary), "check", "--quiet", "--atol", ATOL, "--rtol", RTOL, "--threads", "1",
             "--json", str(out)] + [str(c) for c in cases],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        if out.exists():
            return json.loads(out.read_text())
    if len(cases) == 1:
        reason = (proc.stderr.strip().splitlines() or ["the process died"])[-1]
        return [{"case": cases[0].name, "passed": False,
                 "error": f"crash (exit {proc.returncode}): {reason}", "ops": []}]
    half = len(cases) // 2
    return run_check(binary, cases[:half]) + run_check(binary, cases[half:])


def norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


# Case-name prefixes that abbreviate the op they test.
ALIASES = {"sce": "SoftmaxCrossEntropyLoss", "nllloss": "NegativeLogLikelihoodLoss",
           "basicconv": "Conv", "trainingdropout": "Dropout", "mvn": "MeanVarianceNormalization",
           "l1normalization": "LpNormalization", "l2normalization": "LpNormalization",
           "rmsnormalization": "RMSNormalization", "tril": "Trilu", "triu": "Trilu",
           "castlike": "CastLike", "globalaveragepool": "GlobalAveragePool",
           "globalmaxpool": "GlobalMaxPool", "groupnormalization": "GroupNormalization",
           "layernormalization": "LayerNormalization", "reducelogsumexp": "ReduceLogSumExp"}


def op_of(case: str, ops: list, known: set) -> str:
    """The op a case tests: the longest known op name (or alias) that prefixes the case name."""
    name = norm(case[len("test_"):] if case.startswith("test_") else case)
    for alias in sorted(ALIASES, key=len, reverse=True):
        if name.startswith(alias):
            return ALIASES[alias]
    best = ""
    for op in known:
        if name.startswith(norm(op)) and len(op) > len(best):
            best = op
    if best:
        return best
    return ops[0] if ops else "(unknown)"


# Failures that need what this engine leaves out on purpose, with why (docs/conformance.md
# prints the reasons).
OUT_OF_SCOPE = [
    ("ai.onnx.preview.training", "training ops"),
    ("training mode", "training mode"),
    ("ai.onnx.ml", "ai.onnx.ml domain"),
    ("Bernoulli", "random generators"),
    ("RandomUniformLike", "random generators"),
    ("ImageDecoder", "image decoding"),
]
WHY = {
    "training ops": "Adagrad, Adam, Momentum and Gradient update weights or differentiate: "
                    "training, which an inference engine does not do.",
    "training mode": "BatchNormalization with its running-statistics outputs and Dropout with "
                     "training_mode set are the training forms of these ops; their inference "
                     "forms pass.",
    "ai.onnx.ml domain": "the classical-ML operator set (tree ensembles, label encoders, "
                         "feature extractors) of scikit-learn converters: a domain of its own, "
                         "not used by the neural networks this engine serves.",
    "random generators": "Bernoulli and RandomUniformLike draw random numbers: the references "
                         "hold one draw of numpy's generator, which no other generator (ours "
                         "included) reproduces, so these cases cannot pass by comparison.",
    "image decoding": "ImageDecoder decodes JPEG, PNG, WebP, TIFF and JPEG 2000 files: a set "
                      "of codecs (and their size and attack surface) that belongs in the "
                      "application, before the model.",
}


def scope_of(error: str) -> str:
    """The out-of-scope category of a failure, or "" for a gap in the engine."""
    for needle, category in OUT_OF_SCOPE:
        if needle in error:
            return category
    return ""


def reason_of(error: str) -> str:
    line = error.strip().splitlines()[0] if error.strip() else "outputs differ"
    return line if len(line) <= 160 else line[:157] + "..."


def write_report(all_results: list, allow: set):
    results = [r for r in all_results if r["suite"] == "node"]
    others = [r for r in all_results if r["suite"] != "node"]
    known = {op for r in results for op in r["ops"]}
    by_op = collections.defaultdict(lambda: [0, 0])
    for r in results:
        op = op_of(r["case"], r["ops"], known)
        r["op"] = op
        by_op[op][1] += 1
        if r["passed"]:
            by_op[op][0] += 1
    passed = sum(1 for r in results if r["passed"])
    out_of_scope = sum(1 for r in results if not r["passed"] and scope_of(r["error"]))
    categories = sorted({scope_of(r["error"]) for r in all_results if not r["passed"]} - {""})
    lines = [
        "# ONNX conformance",
        "",
        f"Generated by `scripts/conformance.py` from the ONNX {ONNX_VERSION} backend node tests, "
        f"checked with `ferrolite check --atol {ATOL} --rtol {RTOL}`.",
        "",
        f"**{passed} of {len(results)} node cases pass**; {len(allow)} cases are in the allowlist "
        "(`tests/conformance/allowlist.txt`, with the older suites below), which CI enforces and "
        "which only grows.",
        "",
        f"Of the {len(results) - passed} failing node cases, {out_of_scope} need what the engine "
        f"leaves out on purpose ({', '.join(categories)}); "
        f"{len(results) - passed - out_of_scope} are gaps.",
        "",
        "## Why the out-of-scope cases stay out",
        "",
    ]
    lines += [f"- **{c}**: {WHY.get(c, '')}" for c in categories]
    lines += [
        "",
        "## By op type",
        "",
        "| op | passed | total |",
        "| --- | ---: | ---: |",
    ]
    for op in sorted(by_op):
        p, t = by_op[op]
        lines.append(f"| {op} | {p} | {t} |")
    if others:
        lines += ["", "## Older suites", "",
                  "Models converted from PyTorch at opsets 6 to 9 (`pytorch-converted`, "
                  "`pytorch-operator`) and small whole models (`simple`) from the same wheel: "
                  "they hold older forms of ops (PRelu with a per-channel slope before opset 7, "
                  "for one) and keep their meaning checked.", "",
                  "| suite | passed | total |", "| --- | ---: | ---: |"]
        for suite in SUITES[1:]:
            rs = [r for r in others if r["suite"] == suite]
            if rs:
                lines.append(f"| {suite} | {sum(r['passed'] for r in rs)} | {len(rs)} |")
    failing = sorted((r for r in all_results if not r["passed"]), key=lambda r: r["case"])
    for r in failing:
        r.setdefault("op", op_of(r["case"].split("/")[-1], r["ops"], known))
    lines += ["", "## Failing cases: gaps in the engine", "", "| case | op | why |", "| --- | --- | --- |"]
    for r in failing:
        if not scope_of(r["error"]):
            why = reason_of(r["error"]).replace("|", "\\|")
            lines.append(f"| {r['case']} | {r['op']} | {why} |")
    lines += ["", "## Failing cases: out of scope", "", "| case | op | needs | error |",
              "| --- | --- | --- | --- |"]
    for r in failing:
        category = scope_of(r["error"])
        if category:
            why = reason_of(r["error"]).replace("|", "\\|")
            lines.append(f"| {r['case']} | {r['op']} | {category} | {why} |")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="add newly passing cases to the allowlist")
    ap.add_argument("--binary", type=Path, help="ferrolite binary (default: build target/release/ferrolite)")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("FERROLITE_CACHE", ROOT / ".conformance")))
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    args = ap.parse_args()

    binary = args.binary
    if binary is None:
        subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "ferrolite-cli"], cwd=ROOT, check=True)
        binary = ROOT / "target" / "release" / "ferrolite"
    results = []
    for suite in SUITES:
        suite_dir = fetch_suite(args.cache, suite)
        cases = sorted(p for p in suite_dir.iterdir() if p.is_dir() and args.filter in p.name)
        if not cases:
            continue
        for r in run_check(binary, cases):
            r["suite"] = suite
            if suite != "node":
                r["case"] = f"{suite}/{r['case']}"
            results.append(r)

    allow = set()
    if ALLOWLIST.exists():
        allow = {l.strip() for l in ALLOWLIST.read_text().splitlines() if l.strip() and not l.startswith("#")}
    passed = {r["case"] for r in results if r["passed"]}
    ran = {r["case"] for r in results}
    regressions = sorted((allow & ran) - passed)
    new = sorted(passed - allow)

    if args.update and not regressions:
        allow |= passed
        ALLOWLIST.parent.mkdir(parents=True, exist_ok=True)
        ALLOWLIST.write_text("# ONNX node cases that must pass (scripts/conformance.py --update adds to it)\n"
                             + "".join(f"{c}\n" for c in sorted(allow)))
    if not args.filter:
        write_report(results, allow)

    for c in regressions:
        err = next(r["error"] for r in results if r["case"] == c)
        print(f"REGRESSION {c}: {reason_of(err)}")
    if new and not args.update:
        print(f"{len(new)} passing case(s) not in the allowlist yet (run with --update to add them)")
    node = [r for r in results if r["suite"] == "node"]
    others = [r for r in results if r["suite"] != "node"]
    if others:
        n = sum(r["passed"] for r in others)
        print(f"older suites ({', '.join(SUITES[1:])}): {n} passed, {len(others) - n} failed")
    n = sum(r["passed"] for r in node)
    print(f"{n} passed, {len(node) - n} failed")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
