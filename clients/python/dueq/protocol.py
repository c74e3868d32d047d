"""The dueq wire protocol, version 1 (docs/protocol.md): frames are msgpack
arrays ``[version, type, body]`` whose body is an array of the frame's fields
in the documented order. This module encodes the frames a client sends and
checks every frame it receives before anything reads it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Sequence

import msgpack  # type: ignore[import]
import xxhash

# Payload checksums are XXH3-64 (python-xxhash 2.0 and later). The package
# does not pin xxhash's version (Debian 12's says 0.0.0): it checks here.
if not hasattr(xxhash, "xxh3_64_intdigest"):
    raise ImportError("dueq needs python-xxhash 2.0 or later (XXH3-64); "
                      f"this one is {getattr(xxhash, 'VERSION', 'of an unknown version')}")

VERSION = 1
MAX_FRAME_BYTES = 16 << 20
MAX_PAYLOAD_BYTES = 1 << 20
MAX_BATCH = 10_000
# The most values a reply to a client may hold (protocol.md 1): a STATS_REPLY
# lists every queue, up to 100,000, so its arrays pass two batches.
MAX_REPLY_VALUES = 4_000_000
MAX_ERROR_TEXT = 4096
MAX_SNOOZE_MS = 10 * 366 * 86_400_000  # a snooze's longest delay
MAX_RESULT_BYTES = 64 << 10  # a done job's result
MAX_PROGRESS_TEXT = 256  # a progress report's text (bytes)
MAX_WAIT_MS = 60_000  # one WAIT request's longest timeout
MAX_CAPACITY = 10_000
MAX_WEIGHT = 1000
MAX_GROUP_JOBS = 1000  # jobs of one GROUP_ENQUEUE (a flow, or a batch's members at once)
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


class Type(enum.IntEnum):
    HELLO = 1
    WELCOME = 2
    HEARTBEAT = 4
    PONG = 5
    RESULTS = 6
    CONFIRM = 7
    BYE = 8
    CANCEL = 9
    ENQUEUE = 10
    ENQUEUE_REPLY = 11
    STATS_REQUEST = 12
    STATS_REPLY = 13
    JOB_REQUEST = 14
    JOB_REPLY = 15
    ADMIN_REQUEST = 16
    ADMIN_REPLY = 17
    TASKS = 18
    RECEIVED = 19
    ERROR = 20
    STARTING = 21
    START_REPLY = 22
    HAND_BACK = 23
    WAIT = 24
    WAIT_REPLY = 25
    PROGRESS = 26
    GROUP_ENQUEUE = 27
    GROUP_ENQUEUE_REPLY = 28


class Outcome(enum.IntEnum):
    DONE = 0
    FAILED = 1
    FAILED_FINAL = 2
    CANCELLED = 3
    SNOOZED = 4
    EXPIRED = 5


class EnqueueStatus(enum.IntEnum):
    ACCEPTED = 0
    DUPLICATE = 1
    REJECTED = 2
    OVERLOADED = 3


class BadFrame(ValueError):
    """A frame that fails docs/protocol.md section 2; nothing in it may be used."""


def checksum(payload: bytes) -> int:
    """XXH3-64 of the payload with seed 0: the TASKS `payload_checksum`."""
    return int(xxhash.xxh3_64_intdigest(payload))


def encode(type_: Type, body: Sequence[Any]) -> bytes:
    packed: bytes = msgpack.packb([VERSION, int(type_), list(body)], use_bin_type=True)
    return packed


def decode(data: bytes, reply: bool = False) -> tuple[Type, list[Any]]:
    """The type and body of a frame, or BadFrame naming what is wrong.

    `reply`: a broker's answer to a client, whose arrays may be as long as
    MAX_REPLY_VALUES (a worker's frames stay within two batches).
    """
    if len(data) > MAX_FRAME_BYTES:
        raise BadFrame("frame larger than 16 MiB")
    try:
        max_array = MAX_REPLY_VALUES if reply else MAX_BATCH * 2
        # A broker's answers may carry any bytes (a payload, an error text):
        # those that are not UTF-8 are kept as surrogate escapes, not refused.
        frame = msgpack.unpackb(data, raw=False, strict_map_key=True, max_array_len=max_array,
                                unicode_errors="surrogateescape" if reply else "strict",
                                max_map_len=MAX_BATCH, max_bin_len=MAX_FRAME_BYTES, max_str_len=MAX_FRAME_BYTES)
    except Exception as error:  # msgpack raises several types for bad input
        raise BadFrame(f"not msgpack: {error}") from None
    if not isinstance(frame, list) or len(frame) != 3:
        raise BadFrame("a frame is an array of [version, type, body]")
    version, type_code, body = frame
    if version != VERSION or isinstance(version, bool):
        raise BadFrame("unsupported protocol version")
    try:
        type_ = Type(type_code)
    except ValueError:
        raise BadFrame(f"unknown frame type {type_code!r}") from None
    if not isinstance(body, list):
        raise BadFrame("the body is not an array")
    return type_, body


# -- field readers: each checks the wire type and range docs/protocol.md gives

def _fields(value: Any, need: int, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise BadFrame(f"{what}: not an array")
    if len(value) < need:
        raise BadFrame(f"{what}: {len(value)} fields where {need} are needed")
    return value


def _uint(value: Any, what: str, high: int = U64, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BadFrame(f"{what}: not an integer in {low}..{high}")
    return value


def _int(value: Any, what: str) -> int:
    return _uint(value, what, I64_MAX, I64_MIN)


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise BadFrame(f"{what}: not a str")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise BadFrame(f"{what}: not a bool")
    return value


def _bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):  # receivers MUST accept str for a payload
        return value.encode()
    raise BadFrame(f"{what}: not bin")


def _list(value: Any, what: str, high: int = MAX_BATCH, low: int = 0) -> list[Any]:
    if not isinstance(value, list) or not low <= len(value) <= high:
        raise BadFrame(f"{what}: not an array of {low}..{high} items")
    return value


@dataclass(frozen=True)
class JobRef:
    queue: str
    id: str
    token: int

    def wire(self) -> list[Any]:
        return [self.queue, self.id, self.token]

    @staticmethod
    def read(value: Any) -> "JobRef":
        queue, id_, token = _fields(value, 3, "job reference")[:3]
        return JobRef(_str(queue, "queue"), _str(id_, "id"), _uint(token, "token", low=1))


@dataclass(frozen=True)
class Task:
    """One job of a TASKS frame."""
    queue: str
    id: str
    type: str
    payload: bytes
    due_ms: int
    attempt: int
    max_attempts: int
    token: int
    created_ms: int
    payload_checksum: int
    start_check: int
    key: bytes = b""  # empty: none, or a broker before 0.7 (11 fields)
    start_by_ms: int = 0  # never started after this (Unix ms); 0: none, or a broker before 0.8
    traceparent: str = ""  # the W3C trace context it was enqueued with; "": none (or a broker before 0.9)
    tracestate: str = ""

    @property
    def ref(self) -> JobRef:
        return JobRef(self.queue, self.id, self.token)

    @staticmethod
    def read(value: Any) -> "Task":
        f = _fields(value, 11, "task")
        start_check = _uint(f[10], "start_check", 2)
        return Task(_str(f[0], "queue"), _str(f[1], "id"), _str(f[2], "type"), _bytes(f[3], "payload"),
                    _int(f[4], "due_ms"), _uint(f[5], "attempt", U32), _uint(f[6], "max_attempts", U32),
                    _uint(f[7], "token", low=1), _int(f[8], "created_ms"), _uint(f[9], "payload_checksum"),
                    start_check, _bytes(f[11], "key") if len(f) > 11 else b"",
                    _int(f[12], "start_by_ms") if len(f) > 12 else 0,
                    _str(f[13], "traceparent") if len(f) > 13 else "",
                    _str(f[14], "tracestate") if len(f) > 14 else "")


@dataclass(frozen=True)
class Welcome:
    broker_id: str
    heartbeat_ms: int
    worker_timeout_ms: int  # 0: a broker before 0.3 did not say
    delivery_timeout_ms: int

    @staticmethod
    def read(body: list[Any]) -> "Welcome":
        f = _fields(body, 2, "WELCOME")
        timeouts = [_uint(v, "timeout", U32) for v in f[2:4]] + [0, 0]
        return Welcome(_str(f[0], "broker_id"), _uint(f[1], "heartbeat_ms", U32, 1), timeouts[0], timeouts[1])


@dataclass(frozen=True)
class Tasks:
    items: list[Task]
    seq: int

    @staticmethod
    def read(body: list[Any]) -> "Tasks":
        f = _fields(body, 2, "TASKS")
        return Tasks([Task.read(item) for item in _list(f[0], "items", MAX_BATCH, 1)], _uint(f[1], "seq", low=1))


@dataclass(frozen=True)
class ErrorReply:
    request_id: int
    code: str
    message: str
    retry_after_ms: int

    @staticmethod
    def read(body: list[Any]) -> "ErrorReply":
        f = _fields(body, 4, "ERROR")
        return ErrorReply(_uint(f[0], "request_id"), _str(f[1], "code"), _str(f[2], "message"),
                          _uint(f[3], "retry_after_ms", U32))


def read_refs(value: Any, what: str) -> list[JobRef]:
    return [JobRef.read(item) for item in _list(value, what)]


def read_confirm(body: list[Any]) -> list[JobRef]:
    return read_refs(_fields(body, 1, "CONFIRM")[0], "CONFIRM items")


def read_cancel(body: list[Any]) -> JobRef:
    return JobRef.read(_fields(body, 1, "CANCEL")[0])


def read_start_reply(body: list[Any]) -> tuple[list[JobRef], list[JobRef]]:
    f = _fields(body, 2, "START_REPLY")
    return read_refs(f[0], "go"), read_refs(f[1], "drop")


def read_pong(body: list[Any]) -> str:
    return _str(_fields(body, 1, "PONG")[0], "broker_id")


@dataclass(frozen=True)
class EnqueueResult:
    id: str
    status: EnqueueStatus
    reason: str
    existing_id: str = ""  # duplicate by a unique key: the job that holds it


def read_enqueue_reply(body: list[Any]) -> tuple[int, list[EnqueueResult], int]:
    f = _fields(body, 3, "ENQUEUE_REPLY")
    results = []
    for item in _list(f[1], "results"):
        r = _fields(item, 3, "enqueue result")
        status = _uint(r[1], "status", 3)
        existing = _str(r[3], "existing_id") if len(r) > 3 else ""
        results.append(EnqueueResult(_str(r[0], "id"), EnqueueStatus(status), _str(r[2], "reason"), existing))
    return _uint(f[0], "request_id"), results, _uint(f[2], "retry_after_ms", U32)


# GROUP_ENQUEUE_REPLY statuses (docs/flows.md), by their wire numbers.
GROUP_STATUSES = ("accepted", "duplicate", "rejected", "overloaded", "no_batch", "batch_closed", "batch_exists",
                  "batch_full")


def read_group_enqueue_reply(body: list[Any]) -> tuple[int, str, str, int, int]:
    """request_id, status (a GROUP_STATUSES name), reason, job_index (-1: none) and retry_after_ms."""
    f = _fields(body, 5, "GROUP_ENQUEUE_REPLY")
    status = _uint(f[1], "status", len(GROUP_STATUSES) - 1)
    index = _int(f[3], "job_index")
    if index < -1:
        raise BadFrame("GROUP_ENQUEUE_REPLY job_index: -1 or more")
    return _uint(f[0], "request_id"), GROUP_STATUSES[status], _str(f[2], "reason"), index, _uint(f[4], "retry_after_ms", U32)


STATS_FIELDS = ("queue", "scheduled", "waiting", "in_flight", "done", "dead", "accepted", "retried", "stale_acks",
                "next_due_ms", "cancelled", "purged", "died", "unconfirmed", "replayed", "stale_extends",
                "oldest_ready_due_ms", "paused_since_ms", "rate_limit", "rate_burst", "concurrency_limit",
                "history_kept", "history_trimmed", "keys_running", "waiting_for_key", "top_keys", "snoozed", "expired")


@dataclass(frozen=True)
class QueueStats:
    """A STATS_REPLY row; fields an older broker leaves out read as 0."""
    queue: str
    scheduled: int = 0
    waiting: int = 0
    in_flight: int = 0
    done: int = 0
    dead: int = 0
    accepted: int = 0
    retried: int = 0
    stale_acks: int = 0
    next_due_ms: int = 0
    cancelled: int = 0
    purged: int = 0
    died: int = 0
    unconfirmed: int = 0
    replayed: int = 0
    stale_extends: int = 0
    oldest_ready_due_ms: int = 0
    paused_since_ms: int = 0
    rate_limit: float = 0.0
    rate_burst: int = 0
    concurrency_limit: int = 0
    history_kept: int = 0
    history_trimmed: int = 0
    keys_running: int = 0
    waiting_for_key: int = 0
    # The (at most 10) keys with the most jobs waiting for a turn, most
    # first: (key, jobs waiting).
    top_keys: tuple[tuple[bytes, int], ...] = ()
    snoozed: int = 0   # snoozes its handlers asked for, ever
    expired: int = 0   # of died, jobs dead unstarted past their start-by deadline, ever

    @staticmethod
    def read(value: Any) -> "QueueStats":
        row = _fields(value, 12, "stats row")[:len(STATS_FIELDS)]
        values: dict[str, Any] = {"queue": _str(row[0], "queue")}
        for name, v in zip(STATS_FIELDS[1:], row[1:]):
            if name == "top_keys":
                pairs = [_fields(p, 2, "top key") for p in _list(v, "top_keys", 10)]
                values[name] = tuple((_bytes(p[0], "key"), _int(p[1], "waiting")) for p in pairs)
            elif name == "rate_limit":
                if not isinstance(v, (int, float)) or isinstance(v, bool):
                    raise BadFrame("rate_limit: not a number")
                values[name] = float(v)
            else:
                values[name] = _int(v, name)
        return QueueStats(**values)


def read_stats_reply(body: list[Any]) -> tuple[int, list[QueueStats], int]:
    f = _fields(body, 3, "STATS_REPLY")
    return (_uint(f[0], "request_id"), [QueueStats.read(row) for row in _list(f[1], "queues", 1 << 20)],
            _uint(f[2], "workers", U32))


def read_job_reply(body: list[Any]) -> tuple[int, bool, dict[str, str]]:
    f = _fields(body, 3, "JOB_REPLY")
    fields = f[2]
    if not isinstance(fields, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items()):
        raise BadFrame("JOB_REPLY fields: not a map of str to str")
    return _uint(f[0], "request_id"), _bool(f[1], "found"), fields


@dataclass(frozen=True)
class JobEnd:
    """How a job ended (WAIT_REPLY): state is done, dead, cancelled, pending (not
    by the wait's end) or unknown (no such job)."""
    state: str
    finished_ms: int = 0
    result: bytes = b""
    error: str = ""


def read_wait_reply(body: list[Any]) -> tuple[int, JobEnd]:
    fields = _fields(body, 5, "wait_reply")
    state = _str(fields[1], "wait_reply state")
    if state not in ("done", "dead", "cancelled", "pending", "unknown"):
        raise BadFrame(f"unknown wait state {state!r}")
    return _uint(fields[0], "request_id"), JobEnd(state, _int(fields[2], "finished_ms"), _bytes(fields[3], "result"),
                                                  _str(fields[4], "error"))


def read_admin_reply(body: list[Any]) -> tuple[int, list[dict[str, str]], str, str]:
    """request_id, rows, summary and next (where a paged listing goes on; "" when none)."""
    f = _fields(body, 3, "ADMIN_REPLY")
    rows = f[1]
    if not isinstance(rows, list) or not all(
            isinstance(r, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in r.items()) for r in rows):
        raise BadFrame("ADMIN_REPLY rows: not an array of maps of str to str")
    if not isinstance(f[2], str) or (len(f) > 3 and not isinstance(f[3], str)):
        raise BadFrame("ADMIN_REPLY summary and next: str")
    return _uint(f[0], "request_id"), rows, f[2], f[3] if len(f) > 3 else ""


@dataclass
class Hello:
    worker_id: str
    queues: list[str]
    capacity: int
    held: list[JobRef]
    host: str
    pid: int
    weights: list[int] = field(default_factory=list)
    strict: bool = False

    def wire(self) -> list[Any]:
        return [self.worker_id, self.queues, self.capacity, [r.wire() for r in self.held], self.host, self.pid,
                self.weights, self.strict]


@dataclass(frozen=True)
class Result:
    """A RESULTS item: what became of one delivery."""
    ref: JobRef
    outcome: Outcome
    error: str = ""
    snooze_ms: int = 0  # SNOOZED: due again this long after the broker applies it
    result: bytes = b""  # DONE: what the handler returned

    def wire(self) -> list[Any]:
        text = self.error.encode()[-MAX_ERROR_TEXT:].decode(errors="ignore")
        item: list[Any] = [self.ref.queue, self.ref.id, self.ref.token, int(self.outcome), text]
        if self.outcome == Outcome.SNOOZED:
            item.append(min(max(0, int(self.snooze_ms)), MAX_SNOOZE_MS))
        elif self.outcome == Outcome.DONE and self.result:
            item.extend([0, self.result])
        return item
