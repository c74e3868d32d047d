"""Real parts for the Python client's tests: a redis-server and a
dueq-broker started on free loopback ports in a temp dir, and workers as
processes that can really be killed. DUEQ_BIN names the built binaries."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
BIN = Path(os.environ.get("DUEQ_BIN", ROOT / "build-dev" / "bin"))


def free_port() -> int:
    """Below the kernel's ephemeral range, where outgoing connections take no port."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(10_000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


def eventually(check: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


class Deployment:
    """redis-server + dueq-broker (+ processes the test starts), all stopped by close()."""

    def __init__(self, test: unittest.TestCase, broker_args: Optional[list[str]] = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="dueq-py-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        test.addCleanup(self.close)
        self.redis_port = free_port()
        self.redis = self.spawn(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--dir",
                                 str(self.dir), "--appendonly", "yes", "--save", "", "--maxmemory-policy",
                                 "noeviction", "--daemonize", "no"], "redis.log")
        if not eventually(self._redis_up, 10):
            raise RuntimeError("redis-server did not start")
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.broker_args = broker_args or []
        self.broker = self.start_broker()

    def _redis_up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.redis_port), 0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def spawn(self, argv: list[str], log: str, env: Optional[dict[str, str]] = None) -> subprocess.Popen[bytes]:
        out = open(self.dir / log, "ab")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        out.close()
        self.procs.append(proc)
        return proc

    def start_broker(self) -> subprocess.Popen[bytes]:
        proc = self.spawn([str(BIN / "dueq-broker"), "--redis", f"redis://127.0.0.1:{self.redis_port}", "--listen",
                           self.endpoint, "--log-level", "info", *self.broker_args], "broker.log")
        if not eventually(lambda: "listening" in self.log("broker.log") or proc.poll() is not None, 15):
            raise RuntimeError("the broker did not start")
        if proc.poll() is not None:
            raise RuntimeError("the broker exited:\n" + self.log("broker.log"))
        return proc

    def log(self, name: str) -> str:
        path = self.dir / name
        return path.read_text(errors="replace") if path.exists() else ""

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

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def read_records(path: Path) -> list[list[str]]:
    """Lines of `id attempt token ...` that workers append per job start."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]
