"""Real parts for the Python client's tests: a redis-server and a
dueq-broker started on free loopback ports in a temp dir, and workers as
processes that can really be killed. DUEQ_BIN names the built binaries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "conformance"))
import run as conformance  # noqa: E402  (its Deployment and free_port)

free_port = conformance.free_port
BIN = Path(os.environ.get("DUEQ_BIN", ROOT / "build-dev" / "bin"))


def eventually(check: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


class Deployment(conformance.Deployment):
    """redis-server + dueq-broker (+ processes the test starts), all stopped
    when the test ends; the broker takes its defaults and `broker_args`."""

    def __init__(self, test: unittest.TestCase, broker_args: Optional[list[str]] = None) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="dueq-py-"))
        if not os.environ.get("DUEQ_KEEP_DIRS"):  # set it to read a failed test's logs
            test.addCleanup(shutil.rmtree, workdir, True)
        test.addCleanup(self.close)
        self.procs = []  # close() may run before the base class sets it, if a start fails
        super().__init__(BIN, workdir, broker_args or [])

    def cpp_worker(self, queue: str, record: Path, concurrency: int = 4) -> subprocess.Popen[bytes]:
        return self.spawn([str(BIN / "dueq-example-worker"), "--broker", self.endpoint, "--queue", queue,
                           "--concurrency", str(concurrency), "--record", str(record)], "cpp-worker.log")

    def python_worker(self, *args: str, log: str = "py-worker.log",
                      brokers: Optional[list[str]] = None) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "clients" / "python"))
        endpoints = [arg for b in (brokers or [self.endpoint]) for arg in ("--broker", b)]
        return self.spawn([sys.executable, str(Path(__file__).parent / "record_worker.py"), *endpoints, *args], log,
                          env)

    def dueq(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "dueq"), "--broker", self.endpoint, *args], capture_output=True, text=True,
                              timeout=60)


def read_records(path: Path) -> list[list[str]]:
    """Lines of `id attempt token ...` that workers append per job start."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]
