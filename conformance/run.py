#!/usr/bin/env python3
"""Conformance suite for the dueq wire protocol (docs/protocol.md).

Two kinds of case, each a JSON file (conformance/README.md gives the format):

- broker/*.json: frames that scripted peers send to a real broker and the
  answers the protocol requires of it;
- worker/*.json: a worker under test (any language, started from a command
  line) connects through this runner, which forwards its frames to a real
  broker and back, injects the faults a case names (a corrupted payload, a
  lost RESULTS frame, a forced `start_check`, a malformed frame, SIGTERM), and
  checks the frames the worker sends against the MUSTs the case quotes.

Every case starts its own redis-server and dueq-broker on free loopback ports.
Exit status: 0 when every case passed (or, with --expect-fail, when exactly
the cases named failed), 1 otherwise."""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import queue as queue_module
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import msgpack  # type: ignore[import]
import xxhash
import zmq

HERE = Path(__file__).resolve().parent
TYPES = {"HELLO": 1, "WELCOME": 2, "HEARTBEAT": 4, "PONG": 5, "RESULTS": 6, "CONFIRM": 7, "BYE": 8, "CANCEL": 9,
         "ENQUEUE": 10, "ENQUEUE_REPLY": 11, "STATS_REQUEST": 12, "STATS_REPLY": 13, "JOB_REQUEST": 14,
         "JOB_REPLY": 15, "ADMIN_REQUEST": 16, "ADMIN_REPLY": 17, "TASKS": 18, "RECEIVED": 19, "ERROR": 20,
         "STARTING": 21, "START_REPLY": 22, "HAND_BACK": 23,
         "WAIT": 24, "WAIT_REPLY": 25, "PROGRESS": 26, "GROUP_ENQUEUE": 27, "GROUP_ENQUEUE_REPLY": 28}
NAMES = {v: k for k, v in TYPES.items()}
HEARTBEAT_MS = 200
BROKER_FLAGS = ["--heartbeat", f"{HEARTBEAT_MS}ms", "--worker-timeout", "1s", "--delivery-timeout", "2s"]


class CaseFailed(Exception):
    pass


def free_port() -> int:
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


def pack(frame: Any) -> bytes:
    return msgpack.packb(frame, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    # JOB_REPLY values are str holding the job's bytes (payload, key), which
    # need not be UTF-8: carried as surrogates rather than failing the frame.
    return msgpack.unpackb(data, raw=False, strict_map_key=False, unicode_errors="surrogateescape")


def checksum(data: bytes) -> int:
    return int(xxhash.xxh3_64_intdigest(data))


def show(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


# -- the data notation of the case files --------------------------------------

class Vars(dict[str, Any]):
    """Values named in a case: `$queue`, and those captured from answers."""


def build(value: Any, vars_: Vars) -> Any:
    """A frame to send, from its JSON notation."""
    if isinstance(value, str):
        if value.startswith("$$"):
            return value[1:]
        if value.startswith("$"):
            if value[1:] not in vars_:
                raise CaseFailed(f"{value} is not known yet")
            return vars_[value[1:]]
        return value
    if isinstance(value, list):
        return [build(v, vars_) for v in value]
    if isinstance(value, dict):
        if "bin" in value:
            return str(value["bin"]).encode()
        if "var" in value:
            return build("$" + value["var"], vars_)
        if "now_plus_ms" in value:
            return int(time.time() * 1000) + int(value["now_plus_ms"])
        if "map" in value:
            return {k: build(v, vars_) for k, v in value["map"].items()}
        raise CaseFailed(f"unknown notation {value}")
    return value


def frame_of(notation: list[Any], vars_: Vars) -> list[Any]:
    version, type_, body = notation
    return [version, TYPES[type_] if isinstance(type_, str) else type_, build(body, vars_)]


_KINDS: dict[str, Callable[[Any], bool]] = {
    "uint": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "bin": lambda v: isinstance(v, bytes),
    "bool": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "map": lambda v: isinstance(v, dict),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def match(pattern: Any, value: Any, vars_: Vars, where: str = "frame") -> Optional[str]:
    """None when `value` matches `pattern`, else what differs. Captures go to
    `vars_` only when the whole frame matches (the caller copies them)."""
    if isinstance(pattern, dict):
        if "any" in pattern:
            return None
        if "var" in pattern:
            want = vars_.get(pattern["var"])
            return None if value == want and type(value) is type(want) else f"{where}: {show(value)} is not ${pattern['var']} ({show(want)})"
        if "bin" in pattern:
            return None if value == str(pattern["bin"]).encode() else f"{where}: {show(value)} is not bin {pattern['bin']!r}"
        if "checksum_of" in pattern:
            want = checksum(build(pattern["checksum_of"], vars_))
            return None if value == want else f"{where}: checksum {show(value)}, want XXH3-64 {want}"
        if "one_of" in pattern:
            return None if any(match(p, value, vars_, where) is None for p in pattern["one_of"]) else f"{where}: {show(value)} is none of {pattern['one_of']}"
        if "prefix" in pattern:
            return None if isinstance(value, str) and value.startswith(pattern["prefix"]) else f"{where}: {show(value)} does not start with {pattern['prefix']!r}"
        if "type" in pattern:
            kind = pattern["type"]
            if not _KINDS[kind](value):
                return f"{where}: {show(value)} is not {kind}"
            if "min" in pattern and value < pattern["min"]:
                return f"{where}: {value} < {pattern['min']}"
            if "max" in pattern and value > pattern["max"]:
                return f"{where}: {value} > {pattern['max']}"
            if "len" in pattern and len(value) != pattern["len"]:
                return f"{where}: {len(value)} items, want {pattern['len']}"
            if "items" in pattern:
                for i, item in enumerate(value):
                    if (why := match(pattern["items"], item, vars_, f"{where}[{i}]")) is not None:
                        return why
            if "has" in pattern:
                for key, sub in pattern["has"].items():
                    if key not in value:
                        return f"{where}: no key {key!r}"
                    if (why := match(sub, value[key], vars_, f"{where}.{key}")) is not None:
                        return why
            if "capture" in pattern:
                vars_[pattern["capture"]] = value
            return None
        raise CaseFailed(f"unknown pattern {pattern}")
    if isinstance(pattern, list):
        if not isinstance(value, list):
            return f"{where}: {show(value)} is not an array"
        if len(value) < len(pattern):  # a newer peer MAY append fields
            return f"{where}: {len(value)} fields, want at least {len(pattern)}"
        for i, (p, v) in enumerate(zip(pattern, value)):
            if (why := match(p, v, vars_, f"{where}[{i}]")) is not None:
                return why
        return None
    want = build(pattern, vars_)
    if value == want and type(value) is type(want):
        return None
    return f"{where}: {show(value)}, want {show(want)}"


# -- real parts -----------------------------------------------------------------

class Deployment:
    """redis-server and dueq-broker in a temp dir, stopped by close()."""

    def __init__(self, bin_dir: Path, workdir: Path, broker_flags: Optional[list[str]] = None) -> None:
        self.dir = workdir
        self.bin = bin_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.redis_port = free_port()
        self.spawn(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--dir", str(workdir),
                    "--appendonly", "yes", "--save", "", "--maxmemory-policy", "noeviction"], "redis.log")
        self._wait(lambda: self._redis_up(), "redis-server did not start")
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.broker_flags = BROKER_FLAGS if broker_flags is None else broker_flags
        self.broker = self.start_broker()

    def start_broker(self) -> subprocess.Popen[bytes]:
        broker = self.spawn([str(self.bin / "dueq-broker"), "--redis", f"redis://127.0.0.1:{self.redis_port}",
                             "--listen", self.endpoint, "--log-level", "info", *self.broker_flags], "broker.log")
        self._wait(lambda: "listening on" in self.log("broker.log") or broker.poll() is not None,
                   "the broker did not start")
        if broker.poll() is not None:
            raise RuntimeError("the broker exited: " + self.log("broker.log"))
        return broker

    def _wait(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 15
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(what)
            time.sleep(0.02)

    def _redis_up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.redis_port), 0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def spawn(self, argv: list[str], log: str, env: Optional[dict[str, str]] = None) -> subprocess.Popen[bytes]:
        with open(self.dir / log, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.dir / name
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()


class Peer:
    """A scripted DEALER peer of the broker."""

    def __init__(self, context: zmq.Context, endpoint: str, name: str) -> None:  # type: ignore[type-arg]
        self.socket = context.socket(zmq.DEALER)
        self.socket.linger = 0
        self.socket.routing_id = f"conformance-{name}-{random.getrandbits(32):08x}".encode()
        self.socket.connect(endpoint)
        self.name = name
        self.seen: list[Any] = []

    def send(self, data: bytes) -> None:
        self.socket.send(data)

    def recv(self, timeout_s: float) -> Optional[Any]:
        if not self.socket.poll(max(1, int(timeout_s * 1000))):
            return None
        frame = unpack(self.socket.recv())
        self.seen.append(frame)
        return frame

    def request(self, type_: str, body: list[Any], reply: str, timeout_s: float = 5.0) -> list[Any]:
        """A request of the runner's own (enqueue, stats, job lookup, admin)."""
        request_id = random.getrandbits(48) + 1
        self.send(pack([1, TYPES[type_], [request_id, *body]]))
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            frame = self.recv(left)
            if frame and frame[1] in (TYPES[reply], TYPES["ERROR"]) and frame[2][0] == request_id:
                if frame[1] == TYPES["ERROR"]:
                    raise CaseFailed(f"{type_} answered {frame}")
                return frame[2]  # type: ignore[no-any-return]
        raise CaseFailed(f"no answer to {type_} in {timeout_s} s")


# -- broker cases ---------------------------------------------------------------

def run_broker_case(case: dict[str, Any], deployment: Deployment, context: zmq.Context) -> None:  # type: ignore[type-arg]
    vars_ = Vars(queue=f"cq{random.getrandbits(24):06x}")
    peers: dict[str, Peer] = {}

    def peer(name: str) -> Peer:
        if name not in peers:
            peers[name] = Peer(context, deployment.endpoint, name)
        return peers[name]

    for number, step in enumerate(case["steps"], 1):
        where = f"step {number}"
        if "wait_ms" in step:
            time.sleep(step["wait_ms"] / 1000)
        elif "send" in step:
            peer(step["peer"]).send(pack(frame_of(step["send"], vars_)))
        elif "send_hex" in step:
            peer(step["peer"]).send(bytes.fromhex(step["send_hex"]))
        elif "expect" in step:
            p = peer(step["peer"])
            pattern = [step["expect"][0], TYPES.get(step["expect"][1], step["expect"][1]), step["expect"][2]]
            skip = {TYPES[t] for t in step.get("skip", ["PONG"])}
            deadline = time.monotonic() + step.get("within_ms", 3000) / 1000
            got: list[Any] = []
            while True:
                frame = p.recv(deadline - time.monotonic())
                if frame is None:
                    raise CaseFailed(f"{where}: {step['peer']} got no {step['expect'][1]} within "
                                     f"{step.get('within_ms', 3000)} ms; it got {show(got, 600)}")
                trial = Vars(vars_)
                why = match(pattern, frame, trial)
                if why is None:
                    vars_.update(trial)
                    break
                if isinstance(frame, list) and len(frame) == 3 and frame[1] in skip:
                    continue
                raise CaseFailed(f"{where}: {why}")
        elif "expect_nothing_ms" in step:
            p = peer(step["peer"])
            deadline = time.monotonic() + step["expect_nothing_ms"] / 1000
            while (left := deadline - time.monotonic()) > 0:
                frame = p.recv(left)
                if frame is not None and not (isinstance(frame, list) and len(frame) == 3 and frame[1] == TYPES["PONG"]):
                    raise CaseFailed(f"{where}: {step['peer']} should get nothing, got {show(frame)}")
        else:
            raise CaseFailed(f"{where}: unknown step {step}")
    for p in peers.values():
        p.socket.close(0)


# -- worker cases ---------------------------------------------------------------

class Proxy:
    """Sits between the worker under test and the broker: forwards every frame
    (one DEALER to the broker per routing id, so the broker sees the worker's
    own id), records them, and applies the case's faults."""

    def __init__(self, context: zmq.Context, broker_endpoint: str) -> None:  # type: ignore[type-arg]
        self.context = context
        self.broker_endpoint = broker_endpoint
        self.front = context.socket(zmq.ROUTER)
        self.front.linger = 0
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.front.bind(self.endpoint)
        self.backs: dict[bytes, zmq.Socket] = {}  # type: ignore[type-arg]
        self.lock = threading.Lock()
        self.log: list[tuple[float, str, Any]] = []  # (time, "to_broker" | "to_worker" | "injected", frame)
        self.to_worker_hook: Optional[Callable[[Any], Optional[Any]]] = None
        self.to_broker_hook: Optional[Callable[[Any], Optional[Any]]] = None
        self.injections: queue_module.SimpleQueue[bytes] = queue_module.SimpleQueue()
        self.worker_id: Optional[bytes] = None
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def frames(self, direction: str, type_: Optional[str] = None) -> list[tuple[float, Any]]:
        with self.lock:
            return [(t, f) for t, d, f in self.log if d == direction and (type_ is None or f[1] == TYPES[type_])]

    def inject(self, frame: bytes) -> None:
        self.injections.put(frame)

    def _record(self, direction: str, frame: Any) -> None:
        with self.lock:
            self.log.append((time.monotonic(), direction, frame))

    def _loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self.front, zmq.POLLIN)
        while self.running:
            for sock, _ in poller.poll(10):
                if sock is self.front:
                    rid, data = self.front.recv_multipart()
                    self.worker_id = rid
                    if rid not in self.backs:
                        back = self.context.socket(zmq.DEALER)
                        back.linger = 0
                        back.routing_id = rid
                        back.connect(self.broker_endpoint)
                        self.backs[rid] = back
                        poller.register(back, zmq.POLLIN)
                    self._forward(data, self.to_broker_hook, "to_broker", self.backs[rid].send)
                else:
                    data = sock.recv()
                    rid = sock.routing_id
                    self._forward(data, self.to_worker_hook, "to_worker",
                                  lambda out, rid=rid: self.front.send_multipart([rid, out]))
            while not self.injections.empty() and self.worker_id is not None:
                data = self.injections.get()
                try:
                    frame = unpack(data)
                except Exception:
                    frame = [None, None, data]
                self._record("injected", frame)
                self.front.send_multipart([self.worker_id, data])
        for back in self.backs.values():
            back.close(0)
        self.front.close(0)

    def _forward(self, data: bytes, hook: Optional[Callable[[Any], Optional[Any]]], direction: str,
                 send: Callable[[bytes], None]) -> None:
        try:
            frame = unpack(data)
        except Exception:
            frame = None
        if not (isinstance(frame, list) and len(frame) == 3):
            frame = [None, None, data]  # not a frame: forwarded as it is
        if hook is not None and frame[1] is not None:
            out = hook(frame)  # may change the frame in place
            if out is None:
                self._record("withheld_" + direction, frame)
                return
            data = pack(out)
            frame = out
        self._record(direction, frame)
        send(data)

    def close(self) -> None:
        self.running = False
        self.thread.join(5)


def refs_of(frame: Any) -> list[tuple[str, str, int]]:
    """The deliveries a worker frame names (queue, id, token)."""
    type_, body = frame[1], frame[2]
    if type_ == TYPES["RESULTS"]:
        return [(i[0], i[1], i[2]) for i in body[0]]
    if type_ == TYPES["PROGRESS"]:
        return [(i[0], i[1], i[2]) for i in body[0]]
    if type_ in (TYPES["STARTING"], TYPES["BYE"], TYPES["HAND_BACK"], TYPES["CONFIRM"]):
        return [tuple(r) for r in body[0]]  # type: ignore[misc]
    if type_ == TYPES["TASKS"]:
        return [(i[0], i[1], i[7]) for i in body[0]]
    return []


class WorkerCase:
    """One worker case: the worker under test, the proxy, and the checks."""

    def __init__(self, case: dict[str, Any], deployment: Deployment, context: zmq.Context,  # type: ignore[type-arg]
                 command: str) -> None:
        self.case = case
        self.deployment = deployment
        self.queue = f"cq{random.getrandbits(24):06x}"
        self.proxy = Proxy(context, deployment.endpoint)
        self.admin = Peer(context, deployment.endpoint, "admin")
        self.command = command
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.job_ids: list[str] = []
        self.drain_exit: Optional[int] = None
        self.drain_exit_at = 0.0
        # Where a worker command with {record} appends a line per handler
        # start: `id attempt token start_us ...` (start_us: wall clock, µs).
        self.record = deployment.dir / f"starts-{self.queue}.txt" if "{record}" in command else None

    def starts(self) -> list[tuple[str, int, float]]:
        """(id, token, monotonic time) of every handler start the worker recorded."""
        if self.record is None or not self.record.exists():
            return []
        wall_to_monotonic = time.monotonic() - time.time()
        out = []
        for line in self.record.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 4:
                out.append((fields[0], int(fields[2]), int(fields[3]) / 1e6 + wall_to_monotonic))
        return out

    def start_worker(self) -> None:
        argv = shlex.split(self.command.format(endpoint=self.proxy.endpoint, queue=self.queue,
                                               id=f"conformance-{self.queue}", record=self.record or ""))
        with open(self.deployment.dir / "worker.log", "ab") as out:
            try:
                self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as error:
                raise CaseFailed(f"cannot start the worker: {error}") from None

    def stop_worker(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def enqueue(self, spec: dict[str, Any]) -> None:
        jobs = []
        for i in range(spec.get("count", 1)):
            job_id = f"{spec.get('prefix', 'job')}-{len(self.job_ids)}"
            self.job_ids.append(job_id)
            job = [self.queue, job_id, spec["type"], str(spec.get("payload", "")).encode(), 0, 0, 0, 0]
            if "key_hex" in spec:  # sent as the job's key: the broker passes it on as the task's twelfth field
                job.append(bytes.fromhex(spec["key_hex"]))
            jobs.append(job)
        reply = self.admin.request("ENQUEUE", [jobs], "ENQUEUE_REPLY")
        if any(r[1] != 0 for r in reply[1]):
            raise CaseFailed(f"the runner's ENQUEUE was not accepted: {reply}")

    def state(self, job_id: str) -> str:
        reply = self.admin.request("JOB_REQUEST", [job_id, self.queue], "JOB_REPLY")
        return str(reply[2].get("s", "")) if reply[1] else "missing"

    def wait_for(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if self.process is not None and self.process.poll() is not None and self.drain_exit is None:
                tail = (self.deployment.dir / "worker.log").read_text(errors="replace")[-600:]
                raise CaseFailed(f"the worker exited with {self.process.returncode}: …{tail}")
            if time.monotonic() > deadline:
                raise CaseFailed(what)
            time.sleep(0.05)

    def states(self) -> dict[str, str]:
        return {job_id: self.state(job_id) for job_id in self.job_ids}

    def close(self) -> None:
        self.stop_worker()
        self.proxy.close()
        self.admin.socket.close(0)


# Faults: what the proxy does to the traffic. Each returns a hook.

def expire_first_task(case: WorkerCase) -> None:
    done = {"expired": None}

    def hook(frame: Any) -> Any:
        if done["expired"] is None and frame[1] == TYPES["TASKS"]:
            item = frame[2][0][0]
            while len(item) < 12:
                item.append(b"")  # the key, empty, before the deadline
            item[12:] = [int(time.time() * 1000) - 60_000]  # a start-by deadline a minute gone
            done["expired"] = (item[0], item[1], item[7])
            case.expired = done["expired"]  # type: ignore[attr-defined]
        return frame
    case.proxy.to_worker_hook = hook


def corrupt_first_payload(case: WorkerCase) -> None:
    done = {"corrupted": None}

    def hook(frame: Any) -> Any:
        if done["corrupted"] is None and frame[1] == TYPES["TASKS"]:
            item = frame[2][0][0]
            payload = bytearray(item[3] if isinstance(item[3], bytes) else item[3].encode())
            payload[0] ^= 0x01
            item[3] = bytes(payload)  # the checksum stays the broker's
            done["corrupted"] = (item[0], item[1], item[7])
            case.corrupted = done["corrupted"]  # type: ignore[attr-defined]
        return frame
    case.proxy.to_worker_hook = hook


def withhold_first_results(case: WorkerCase) -> None:
    state = {"withheld": None}

    def hook(frame: Any) -> Any:
        if state["withheld"] is None and frame[1] == TYPES["RESULTS"]:
            state["withheld"] = frame
            case.withheld = frame  # type: ignore[attr-defined]
            # The broker "restarted": the worker must say HELLO, then resend.
            case.proxy.inject(pack([1, TYPES["ERROR"], [0, "unknown_worker", "say hello first", 0]]))
            return None
        return frame
    case.proxy.to_broker_hook = hook


def force_start_check(value: int) -> Callable[[WorkerCase], None]:
    def fault(case: WorkerCase) -> None:
        def hook(frame: Any) -> Any:
            if frame[1] == TYPES["TASKS"]:
                for item in frame[2][0]:
                    item[10] = value
            return frame
        case.proxy.to_worker_hook = hook
    return fault


def start_check_2_first(case: WorkerCase) -> None:
    """The first task of the first TASKS frame gets start_check 2, every other one 0."""
    state = {"forced": None}

    def hook(frame: Any) -> Any:
        if frame[1] == TYPES["TASKS"]:
            for item in frame[2][0]:
                if state["forced"] is None:
                    state["forced"] = (item[0], item[1], item[7])
                    item[10] = 2
                else:
                    item[10] = 0
        return frame
    case.proxy.to_worker_hook = hook
    case.forced_alone = state  # type: ignore[attr-defined]


def inject_malformed(case: WorkerCase) -> None:
    bad_item = [case.queue, "forged-1", "noop", b"x", 0, 1, 3, 77, 0, checksum(b"x")]  # 10 of 11 fields
    case.proxy.inject(pack([1, TYPES["TASKS"], [[bad_item], 999_999_001]]))
    good_item = bad_item + [0]
    case.proxy.inject(pack([2, TYPES["TASKS"], [[[case.queue, "forged-2", *good_item[2:]]], 999_999_002]]))
    case.proxy.inject(b"\xc1 not msgpack")


def drop_first_reply(case: WorkerCase) -> None:
    state = {"dropped": False}

    def hook(frame: Any) -> Any:
        if not state["dropped"] and frame[1] == TYPES["ENQUEUE_REPLY"]:
            state["dropped"] = True
            return None
        return frame
    case.proxy.to_worker_hook = hook


def unavailable_first(case: WorkerCase) -> None:
    state = {"answered": False}

    def hook(frame: Any) -> Any:
        if not state["answered"] and frame[1] == TYPES["ENQUEUE"]:
            state["answered"] = True
            case.proxy.inject(pack([1, TYPES["ERROR"], [frame[2][0], "unavailable", "Redis is down (injected)", 300]]))
            return None
        return frame
    case.proxy.to_broker_hook = hook


FAULTS: dict[str, Callable[[WorkerCase], None]] = {
    "drop_first_reply": drop_first_reply,
    "unavailable_first": unavailable_first,
    "corrupt_first_payload": corrupt_first_payload,
    "expire_first_task": expire_first_task,
    "withhold_first_results": withhold_first_results,
    "start_check_1": force_start_check(1),
    "start_check_2": force_start_check(2),
    "start_check_2_first": start_check_2_first,
}


# Checks: what the worker's frames must show.

def check_expired_not_run(case: WorkerCase) -> None:
    """§2 TASKS start_by_ms: a task past its start-by deadline is not started and is reported outcome 5, "expired…"."""
    ref = getattr(case, "expired", None)
    if ref is None:
        raise CaseFailed("no TASKS frame reached the worker to give a deadline gone by")
    reports = [i for _, f in case.proxy.frames("to_broker", "RESULTS") for i in f[2][0] if tuple(i[:3]) == ref]
    if not reports:
        raise CaseFailed(f"no result for the expired job {ref[1]}")
    outcome, error = reports[0][3], reports[0][4]
    if outcome != 5 or not str(error).startswith("expired"):
        raise CaseFailed(f"the expired job was reported outcome {outcome} {error!r}, want 5 'expired…'")
    if ref[2] in [token for _, token, _ in case.starts()]:
        raise CaseFailed(f"the expired job {ref[1]} was started")
    if case.state(ref[1]) != "dead":
        raise CaseFailed(f"the expired job is {case.state(ref[1])}, want dead")


def check_received_before_use(case: WorkerCase) -> None:
    """§3.3: RECEIVED with each TASKS frame's seq, before any of its jobs is reported or announced."""
    sent = case.proxy.frames("to_worker", "TASKS")
    if not sent:
        raise CaseFailed("the broker sent the worker no TASKS frame")
    worker_frames = case.proxy.frames("to_broker")
    for t_sent, tasks in sent:
        seq = tasks[2][1]
        refs = set(refs_of(tasks))
        received = [t for t, f in worker_frames if f[1] == TYPES["RECEIVED"] and f[2][0] == seq]
        if not received:
            raise CaseFailed(f"no RECEIVED for TASKS seq {seq}")
        for t, f in worker_frames:
            if f[1] in (TYPES["RESULTS"], TYPES["STARTING"]) and refs & set(refs_of(f)) and t < received[0]:
                raise CaseFailed(f"{NAMES[f[1]]} naming a job of TASKS seq {seq} came before its RECEIVED")


def check_corrupted_failed_final(case: WorkerCase) -> None:
    """§3.3: a payload that fails its checksum is not run, and is reported failed_final "payload corrupted"."""
    ref = getattr(case, "corrupted", None)
    if ref is None:
        raise CaseFailed("no TASKS frame reached the worker to corrupt")
    reports = [i for _, f in case.proxy.frames("to_broker", "RESULTS") for i in f[2][0] if tuple(i[:3]) == ref]
    if not reports:
        raise CaseFailed(f"no result for the corrupted job {ref[1]}")
    outcome, error = reports[0][3], reports[0][4]
    if outcome != 2 or not str(error).startswith("payload corrupted"):
        raise CaseFailed(f"the corrupted job was reported outcome {outcome} {error!r}, want 2 'payload corrupted…'")
    if case.state(ref[1]) != "dead":
        raise CaseFailed(f"the corrupted job is {case.state(ref[1])}, want dead")


def check_results_resent_after_welcome(case: WorkerCase) -> None:
    """§3.3: HELLO again on unknown_worker, and unconfirmed RESULTS resent after the new WELCOME."""
    case.wait_for(lambda: getattr(case, "withheld", None) is not None, 15, "the worker sent no RESULTS")
    withheld = case.withheld  # type: ignore[attr-defined]
    injected_at = [t for t, d, f in case.proxy.log if d == "injected" and f[1] == TYPES["ERROR"]]

    def resent() -> bool:
        welcomes = [t for t, f in case.proxy.frames("to_worker", "WELCOME") if t > injected_at[0]]
        items = {tuple(i[:3]) for t, f in case.proxy.frames("to_broker", "RESULTS") if welcomes and t > welcomes[0]
                 for i in f[2][0]}
        return all(tuple(i[:3]) in items for i in withheld[2][0])
    try:
        case.wait_for(resent, 5, "")
    except CaseFailed:
        pass  # the checks below name what is missing
    hellos = [t for t, f in case.proxy.frames("to_broker", "HELLO") if t > injected_at[0]]
    if not hellos:
        raise CaseFailed("no HELLO after ERROR unknown_worker")
    welcomes = [t for t, f in case.proxy.frames("to_worker", "WELCOME") if t > hellos[0]]
    if not welcomes:
        raise CaseFailed("no WELCOME after the new HELLO")
    resent = {tuple(i[:3]) for t, f in case.proxy.frames("to_broker", "RESULTS") if t > welcomes[0] for i in f[2][0]}
    missing = [tuple(i[:3]) for i in withheld[2][0] if tuple(i[:3]) not in resent]
    if missing:
        raise CaseFailed(f"{len(missing)} unconfirmed results were not resent after the new WELCOME, e.g. {missing[0]}")


def check_announced_before_start(case: WorkerCase) -> None:
    """§3.3: a task with start_check 1 or 2 starts only after STARTING named it and START_REPLY said go.
    With a worker command that records its starts ({record}), each start is checked against its go;
    every worker's results are too (a result before go shows a start before it)."""
    goes: dict[tuple[Any, ...], float] = {}
    for t, f in case.proxy.frames("to_worker", "START_REPLY"):
        for ref in f[2][0]:
            goes.setdefault(tuple(ref), t)
    if case.record is not None:
        check_starts_after_go(case, {(ref[1], ref[2]): t for ref, t in goes.items()})
    delivered = {r for _, f in case.proxy.frames("to_worker", "TASKS") for r in refs_of(f)}
    for t, f in case.proxy.frames("to_broker", "RESULTS"):
        for item in f[2][0]:
            ref = tuple(item[:3])
            if ref in delivered and (ref not in goes or goes[ref] > t):
                raise CaseFailed(f"job {ref[1]} was reported before START_REPLY said go")


def check_starts_after_go(case: WorkerCase, go_by_delivery: dict[tuple[str, int], float]) -> None:
    """Each recorded start of an announced task (start_check 1 or 2) comes after its go."""
    starts = case.starts()
    if not starts:
        raise CaseFailed("the worker recorded no start ({record})")
    announced = {(i[1], i[7]) for _, f in case.proxy.frames("to_worker", "TASKS") for i in f[2][0] if i[10] >= 1}
    # The clocks are read apart (wall clock in the record, monotonic here,
    # and NTP may slew the wall clock by up to 0.5 ms a second meanwhile): a
    # start counts as before its go only by more than this.
    slack_s = 0.010
    for job_id, token, started in starts:
        if (job_id, token) not in announced:
            continue
        go = go_by_delivery.get((job_id, token))
        if go is None or started < go - slack_s:
            raise CaseFailed(f"job {job_id} started before START_REPLY said go "
                             f"({'no go at all' if go is None else f'{(go - started) * 1000:.1f} ms before it'})")


def check_exclusive_announcement(case: WorkerCase) -> None:
    """§3.3: a start_check 2 task is announced alone, and only after every earlier announced one was confirmed."""
    confirms: dict[tuple[Any, ...], float] = {}
    for t, f in case.proxy.frames("to_worker", "CONFIRM"):
        for ref in f[2][0]:
            confirms.setdefault(tuple(ref), t)
    announced: list[tuple[float, tuple[Any, ...]]] = []
    for t, f in case.proxy.frames("to_broker", "STARTING"):
        refs = refs_of(f)
        if len(refs) != 1:
            raise CaseFailed(f"STARTING named {len(refs)} start_check 2 tasks at once")
        for t_before, ref_before in announced:
            if confirms.get(ref_before, float("inf")) > t:
                raise CaseFailed(f"{refs[0][1]} was announced while {ref_before[1]} ran or awaited its CONFIRM")
        announced.append((t, refs[0]))
    if len(announced) < 2:
        raise CaseFailed(f"{len(announced)} tasks were announced, want every delivered one")


def check_ran_alone(case: WorkerCase) -> None:
    """§3.3: nothing runs beside a start_check 2 task: every other task's result is sent before its STARTING
    (what ran is finished first) or after its own result (what waited starts after it)."""
    alone = case.forced_alone["forced"]  # type: ignore[attr-defined]
    if alone is None:
        raise CaseFailed("the broker sent the worker no TASKS frame")
    starting = [t for t, f in case.proxy.frames("to_broker", "STARTING") if alone in refs_of(f)]
    result = [t for t, f in case.proxy.frames("to_broker", "RESULTS") for i in f[2][0] if tuple(i[:3]) == alone]
    if not starting or not result:
        raise CaseFailed(f"the start_check 2 task {alone[1]} was {'not announced' if not starting else 'not reported'}")
    others = 0
    for t, f in case.proxy.frames("to_broker", "RESULTS"):
        for item in f[2][0]:
            ref = tuple(item[:3])
            if ref == alone:
                continue
            others += 1
            if starting[0] < t < result[0]:
                raise CaseFailed(f"{ref[1]} was reported while the start_check 2 task {alone[1]} ran: they ran together")
    if others == 0:
        raise CaseFailed("no other task ran: the case shows nothing")


def check_heartbeats(case: WorkerCase) -> None:
    """§3.3: HEARTBEAT every heartbeat_ms, listing every job it holds."""
    beats = case.proxy.frames("to_broker", "HEARTBEAT")
    if len(beats) < 3:
        raise CaseFailed(f"{len(beats)} heartbeats")
    # A gap past the worker timeout (1 s here) gets a worker declared lost;
    # shorter ones are left to load (the sanitized suite runs beside it).
    gaps = [b[0] - a[0] for a, b in zip(beats, beats[1:])]
    if max(gaps) >= 1.0:
        raise CaseFailed(f"a gap of {max(gaps) * 1000:.0f} ms between heartbeats (heartbeat_ms {HEARTBEAT_MS}, "
                         "worker timeout 1000 ms)")
    for _, f in beats:
        if (why := match([{"type": "array"}, {"type": "uint", "max": 10000}, {"type": "bool"}], f[2], Vars())):
            raise CaseFailed(f"HEARTBEAT body: {why}")
    job = case.job_ids[0]
    if not any(any(ref[1] == job for ref in f[2][0]) for _, f in beats):
        raise CaseFailed(f"no heartbeat listed the running job {job}")


def check_progress(case: WorkerCase) -> None:
    """§2 PROGRESS, §3.3: reports name deliveries the worker was sent (job and token), with a percent 0..100 and a
    text of at most 256 bytes, coalesced (no more PROGRESS frames than heartbeats, and one more), and the sleeping
    job's percent never goes back."""
    reports = case.proxy.frames("to_broker", "PROGRESS")
    if not reports:
        raise CaseFailed("no PROGRESS while the sleep job ran")
    delivered = {r for _, f in case.proxy.frames("to_worker", "TASKS") for r in refs_of(f)}
    item = [{"type": "str"}, {"type": "str"}, {"type": "uint", "min": 1}, {"type": "uint", "max": 100}, {"type": "bin"}]
    percents = []
    for _, f in reports:
        if (why := match([{"type": "array", "items": item}], f[2], Vars())):
            raise CaseFailed(f"PROGRESS body: {why}")
        if not f[2][0]:
            raise CaseFailed("a PROGRESS frame with no items")
        for i in f[2][0]:
            if (i[0], i[1], i[2]) not in delivered:
                raise CaseFailed(f"PROGRESS names {i[1]} token {i[2]}, a delivery the worker was not sent")
            if len(i[4]) > 256:
                raise CaseFailed(f"a PROGRESS text of {len(i[4])} bytes")
            percents.append(i[3])
    beats = case.proxy.frames("to_broker", "HEARTBEAT")
    if len(reports) > len(beats) + 1:
        raise CaseFailed(f"{len(reports)} PROGRESS frames beside {len(beats)} heartbeats: not coalesced")
    if percents != sorted(percents):
        raise CaseFailed(f"the percent went back: {percents}")


def check_cancelled(case: WorkerCase) -> None:
    """§3.3: on CANCEL the handler is stopped and the outcome is cancelled (3)."""
    job = case.job_ids[0]
    outcomes = [i[3] for _, f in case.proxy.frames("to_broker", "RESULTS") for i in f[2][0] if i[1] == job]
    if outcomes != [3]:
        raise CaseFailed(f"the cancelled job was reported with outcomes {outcomes}, want [3]")


def check_malformed_dropped(case: WorkerCase) -> None:
    """§3.1: a malformed frame is dropped whole: no RECEIVED, no result, nothing run."""
    for _, f in case.proxy.frames("to_broker"):
        if f[1] == TYPES["RECEIVED"] and f[2][0] in (999_999_001, 999_999_002):
            raise CaseFailed(f"RECEIVED for the malformed frame seq {f[2][0]}")
        if any(ref[1].startswith("forged-") for ref in refs_of(f)):
            raise CaseFailed(f"{NAMES[f[1]]} names a job of a malformed frame")


def check_drained(case: WorkerCase) -> None:
    """§3.3 (SHOULD): on SIGTERM, BYE with the unstarted jobs, HEARTBEAT draining, finish the running ones, exit."""
    byes = case.proxy.frames("to_broker", "BYE")
    if not byes:
        raise CaseFailed("no BYE after SIGTERM")
    if case.drain_exit != 0:
        raise CaseFailed(f"the worker exited with {case.drain_exit} after SIGTERM")
    handed_back = {r for _, f in byes for r in refs_of(f)}
    started = {r for _, f in case.proxy.frames("to_broker", "RESULTS") for r in refs_of(f)}
    if handed_back & started:
        raise CaseFailed("a job listed in BYE was reported as run")
    # Heartbeats go on while it drains: one is due when the drain lasted
    # three heartbeat intervals (a shorter one may end before the next).
    t_bye = byes[0][0]
    if case.drain_exit_at - t_bye > 3 * HEARTBEAT_MS / 1000 and not any(
            f[2][2] is True for t, f in case.proxy.frames("to_broker", "HEARTBEAT") if t >= t_bye):
        raise CaseFailed(f"no HEARTBEAT with draining true in the {1000 * (case.drain_exit_at - t_bye):.0f} ms "
                         "between BYE and the exit")


def check_resent_with_the_same_ids(case: WorkerCase) -> None:
    """§3.2: retrying an ENQUEUE with the same ids is safe, and a producer MUST retry with the same ids."""
    sent = [f for _, f in case.proxy.frames("to_broker", "ENQUEUE")]
    withheld = [f for t, d, f in case.proxy.log if d == "withheld_to_broker" and f[1] == TYPES["ENQUEUE"]]
    frames = withheld + sent
    if len(frames) < 2:
        raise CaseFailed(f"the producer sent {len(frames)} ENQUEUE frames; it must send the request again")
    ids = [sorted(job[1] for job in f[2][1]) for f in frames]
    if any(i != ids[0] for i in ids):
        raise CaseFailed(f"the resent ENQUEUE carried other ids: {ids}")
    reply = case.admin.request("STATS_REQUEST", [], "STATS_REPLY")
    accepted = sum(row[6] for row in reply[1] if row[0] == case.queue)
    if accepted != 1:
        raise CaseFailed(f"{accepted} jobs accepted, want 1")


def check_waited_retry_after(case: WorkerCase) -> None:
    """§3.2, §5: after ERROR unavailable the producer retries after retry_after_ms (300 here), not before."""
    errors = [t for t, d, f in case.proxy.log if d == "injected" and f[1] == TYPES["ERROR"]]
    resent = [t for t, f in case.proxy.frames("to_broker", "ENQUEUE") if errors and t > errors[0]]
    if not errors or not resent:
        raise CaseFailed("no ENQUEUE after the injected ERROR unavailable")
    if resent[0] - errors[0] < 0.25:
        raise CaseFailed(f"resent {1000 * (resent[0] - errors[0]):.0f} ms after ERROR unavailable, before retry_after_ms 300")


def check_all_jobs_done(case: WorkerCase) -> None:
    """Every job the case enqueued ends done (within 15 s)."""
    case.wait_for(lambda: all(s == "done" for s in case.states().values()), 15, f"jobs did not end done: {case.states()}")


CHECKS: dict[str, Callable[[WorkerCase], None]] = {
    "all_jobs_done": check_all_jobs_done,
    "resent_with_the_same_ids": check_resent_with_the_same_ids,
    "waited_retry_after": check_waited_retry_after,
    "received_before_use": check_received_before_use,
    "corrupted_failed_final": check_corrupted_failed_final,
    "expired_not_run": check_expired_not_run,
    "results_resent_after_welcome": check_results_resent_after_welcome,
    "announced_before_start": check_announced_before_start,
    "exclusive_announcement": check_exclusive_announcement,
    "ran_alone": check_ran_alone,
    "heartbeats": check_heartbeats,
    "progress": check_progress,
    "cancelled": check_cancelled,
    "malformed_dropped": check_malformed_dropped,
    "drained": check_drained,
}


def run_worker_case(case: dict[str, Any], deployment: Deployment, context: zmq.Context,  # type: ignore[type-arg]
                    command: str) -> None:
    wc = WorkerCase(case, deployment, context, command)
    try:
        for fault in case.get("faults", []):
            FAULTS[fault](wc)
        for step in case["steps"]:
            if "enqueue" in step:
                wc.enqueue(step["enqueue"])
            elif step.get("start_worker"):
                wc.start_worker()
            elif "wait_ms" in step:
                time.sleep(step["wait_ms"] / 1000)
            elif step.get("inject_malformed"):
                inject_malformed(wc)
            elif "wait_until_running" in step:
                wc.wait_for(lambda: bool(wc.proxy.frames("to_worker", "TASKS")), 10, "the broker sent the worker no TASKS frame")
                time.sleep(step["wait_until_running"] / 1000)
            elif step.get("cancel_first_job"):
                wc.admin.request("ADMIN_REQUEST", ["cancel", wc.queue, [wc.job_ids[0]], 0, 0], "ADMIN_REPLY")
            elif "producer_exits" in step:
                assert wc.process is not None
                try:
                    code = wc.process.wait(step["producer_exits"] / 1000)
                except subprocess.TimeoutExpired:
                    raise CaseFailed(f"the producer did not finish in {step['producer_exits']} ms") from None
                if code != 0:
                    tail = (wc.deployment.dir / "worker.log").read_text(errors="replace")[-600:]
                    raise CaseFailed(f"the producer exited with {code}: …{tail}")
            elif step.get("sigterm"):
                assert wc.process is not None
                wc.process.send_signal(signal.SIGTERM)
                try:
                    wc.drain_exit = wc.process.wait(step.get("within_ms", 10_000) / 1000)
                    wc.drain_exit_at = time.monotonic()
                except subprocess.TimeoutExpired:
                    raise CaseFailed("the worker did not exit after SIGTERM") from None
            elif "all_jobs_end" in step:
                want = step["all_jobs_end"]
                wc.wait_for(lambda: all(s in want for s in wc.states().values()),
                            step.get("within_ms", 15_000) / 1000,
                            f"jobs did not end {want}: {wc.states()}")
            else:
                raise CaseFailed(f"unknown step {step}")
        for check in case["checks"]:
            CHECKS[check](wc)
    finally:
        wc.close()


# -- the suite ------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, type=Path, help="directory holding dueq-broker")
    parser.add_argument("--worker", help="command starting the worker under test; {endpoint} and {queue} are "
                                         "replaced (it handles job types noop, sleep (payload = ms) and fail); "
                                         "{record}, if given, by a file it appends `id attempt token start_us` to "
                                         "as each handler starts (start_us: wall clock, microseconds)")
    parser.add_argument("--producer", help="command enqueuing one job and exiting 0 once the broker has it; "
                                           "{endpoint}, {queue} and {id} are replaced")
    parser.add_argument("--suite", choices=["broker", "worker", "producer", "all"], default="all")
    parser.add_argument("--only", default="*", help="run cases whose name matches this glob")
    parser.add_argument("--expect-fail", default="", help="comma-separated cases that must fail (a client "
                                                           "known to skip a MUST)")
    args = parser.parse_args()
    suites = ["broker", "worker", "producer"] if args.suite == "all" else [args.suite]
    for suite in ("worker", "producer"):
        if suite in suites and not getattr(args, suite):
            parser.error(f"--{suite} is needed for the {suite} suite")
    expect_fail = {n for n in args.expect_fail.split(",") if n}
    context = zmq.Context()
    passed, failed = [], []
    kept: dict[str, Path] = {}  # the logs of failed cases
    for suite in suites:
        for path in sorted((HERE / suite).glob("*.json")):
            case = json.loads(path.read_text())
            name = f"{suite}/{path.stem}"
            if not fnmatch.fnmatch(name, args.only) and not fnmatch.fnmatch(path.stem, args.only):
                continue
            workdir = Path(tempfile.mkdtemp(prefix="dueq-conformance-"))
            deployment = None
            started = time.monotonic()
            try:
                deployment = Deployment(args.bin, workdir)
                if suite == "broker":
                    run_broker_case(case, deployment, context)
                else:
                    run_worker_case(case, deployment, context, getattr(args, suite))
                passed.append(name)
                print(f"PASS {name} ({time.monotonic() - started:.1f} s)", flush=True)
            except (CaseFailed, RuntimeError) as error:
                failed.append(name)
                print(f"FAIL {name}: {error}\n     rule: {case.get('rule', '')}\n     logs: {workdir}", flush=True)
            finally:
                if deployment is not None:
                    deployment.close()
                if name in passed:
                    shutil.rmtree(workdir, ignore_errors=True)
                else:
                    kept[name] = workdir
    print(f"{len(passed)} passed, {len(failed)} failed", flush=True)
    if expect_fail:
        unexpected = sorted(set(failed) ^ {n if "/" in n else f"{s}/{n}" for n in expect_fail for s in suites})
        if unexpected:
            print(f"expected exactly {sorted(expect_fail)} to fail; differs on: {unexpected}", flush=True)
            return 1
        print(f"failed as expected: {sorted(failed)}", flush=True)
        for workdir in kept.values():  # expected failures leave no logs behind
            shutil.rmtree(workdir, ignore_errors=True)
        return 0
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
