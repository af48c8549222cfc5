"""Starts `ferrolite serve` on 127.0.0.1 for the tests, on ports it picks itself.

FERROLITE_BIN names the CLI (default target/release/ferrolite); FERROLITE_MODELS the model zoo
(default ../shared/models)."""

import json
import os
import pathlib
import signal
import subprocess
import time

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(os.environ.get("FERROLITE_MODELS", ROOT.parent / "shared" / "models"))
BIN = pathlib.Path(os.environ.get("FERROLITE_BIN", ROOT / "target" / "release" / "ferrolite"))


def case_dir(name):
    d = MODELS / "cases" / name
    if not d.is_dir():
        pytest.fail(f"model zoo case {d} not found: set FERROLITE_MODELS to ../shared/models")
    return d


def read_pb(path):
    t = onnx.TensorProto()
    t.ParseFromString(pathlib.Path(path).read_bytes())
    return numpy_helper.to_array(t)


def case_data(name):
    """(inputs, outputs) of a zoo case's test_data_set_0, in order."""
    d = case_dir(name) / "test_data_set_0"
    ins = [read_pb(p) for p in sorted(d.glob("input_*.pb"))]
    outs = [read_pb(p) for p in sorted(d.glob("output_*.pb"))]
    return ins, outs


class Server:
    def __init__(self, tmp, models, *args):
        self.repo = tmp / "repo"
        self.repo.mkdir()
        for m in models:
            (self.repo / m).mkdir()
            (self.repo / m / "model.onnx").symlink_to(case_dir(m) / "model.onnx")
        self.log_path = tmp / "server.log"
        self.log = open(self.log_path, "w")
        cmd = [str(BIN), "serve", "--model-repository", str(self.repo), "--host", "127.0.0.1",
               "--http-port", "0", "--grpc-port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 60
        while time.time() < deadline:
            for line in self.log_lines():
                if line.get("msg") == "listening":
                    self.http = line["http"]
                    self.grpc = line["grpc"]
                    return
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("server did not start within 60 s")

    def log_lines(self):
        """Every log line, parsed: they must all be JSON objects."""
        lines = []
        for raw in self.log_path.read_text().splitlines():
            if raw.strip():
                lines.append(json.loads(raw))
        return lines

    def rss_kib(self):
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """Three zoo models, two sessions each, 8 MiB body limit."""
    s = Server(tmp_path_factory.mktemp("main"),
               ["mobilenet_v2", "bert_mini", "ppocr_mobile_v2_cls"],
               "--sessions", "2", "--max-body-mb", "8")
    yield s
    assert s.stop() == 0


def assert_close(got, want, atol=1e-4, rtol=1e-4):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)
