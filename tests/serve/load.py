"""The bounded load run of `ferrolite serve` (docs/serving.md).

1. `ferrolite bench --sessions S` alone: the throughput S sessions reach without a server.
2. `ferrolite serve --sessions S` on 127.0.0.1 with the model, then `ferrolite-load` (gRPC,
   one connection per client) sends a fixed number of requests from C concurrent clients,
   checking every response against the outputs of the input it was sent with. Done twice.

Fails on any error, lost or mismatched response, a throughput under --min-ratio of the bench
figure, or a server RSS that grows more than --max-rss-growth from the first run to the second.

    python tests/serve/load.py [--requests 10000] [--concurrency 8] [--sessions 2] [--json F]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from conftest import BIN, ROOT, Server, case_dir  # noqa: E402

LOAD = pathlib.Path(os.environ.get("FERROLITE_LOAD_BIN", ROOT / "target" / "release" / "ferrolite-load"))


def cpu_model():
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mobilenet_v2")
    p.add_argument("--requests", type=int, default=10000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--sessions", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--bench-seconds", type=float, default=10)
    p.add_argument("--min-ratio", type=float, default=0.9)
    p.add_argument("--max-rss-growth", type=float, default=0.05)
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    case = case_dir(a.model)

    bench = json.loads(subprocess.run(
        [str(BIN), "bench", str(case / "model.onnx"), "--sessions", str(a.sessions),
         "--threads", str(a.threads), "--seconds", str(a.bench_seconds), "--json"],
        check=True, capture_output=True, text=True).stdout)
    print(f"bench alone: {bench['throughput_per_s']:.1f} inferences/s "
          f"({a.sessions} sessions x {a.threads} threads)", flush=True)

    runs, failures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(pathlib.Path(tmp), [a.model], "--sessions", str(a.sessions),
                   "--threads", str(a.threads), "--queue-size", str(max(64, a.concurrency)))
        try:
            for i in range(a.runs):
                out = subprocess.run(
                    [str(LOAD), "--grpc", s.grpc, "--model", a.model, "--case", str(case),
                     "--requests", str(a.requests), "--concurrency", str(a.concurrency), "--json"],
                    capture_output=True, text=True)
                r = json.loads(out.stdout)
                r["server_rss_kib"] = s.rss_kib()
                r["ratio_to_bench"] = r["throughput_per_s"] / bench["throughput_per_s"]
                runs.append(r)
                print(f"run {i + 1}: {r['ok']}/{r['requests']} ok, {r['errors']} errors, "
                      f"{r['mismatches']} mismatches; {r['throughput_per_s']:.1f} inferences/s "
                      f"({r['ratio_to_bench']:.3f} of bench); p50 {r['p50_ms']:.1f} ms, "
                      f"p99 {r['p99_ms']:.1f} ms; server RSS {r['server_rss_kib'] / 1024:.1f} MiB",
                      flush=True)
                if out.returncode != 0 or r["errors"] or r["mismatches"] or r["ok"] != a.requests:
                    failures.append(f"run {i + 1}: {r['errors']} errors, {r['mismatches']} "
                                    f"mismatches, {r['failures']} {out.stderr.strip()}")
                if r["ratio_to_bench"] < a.min_ratio:
                    failures.append(f"run {i + 1}: throughput {r['ratio_to_bench']:.3f} of bench, "
                                    f"under {a.min_ratio}")
        finally:
            code = s.stop()
            if code != 0:
                failures.append(f"the server exited with {code}")
    if len(runs) >= 2:
        growth = runs[-1]["server_rss_kib"] / runs[0]["server_rss_kib"] - 1
        print(f"server RSS from run 1 to run {len(runs)}: {growth * 100:+.2f}%")
        if growth > a.max_rss_growth:
            failures.append(f"server RSS grew {growth * 100:.1f}% between identical runs")
    summary = {"cpu": cpu_model(), "model": a.model, "sessions": a.sessions, "threads": a.threads,
               "concurrency": a.concurrency, "bench": bench, "runs": runs, "failures": failures}
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(summary, indent=1))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
