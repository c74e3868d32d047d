"""Producer: enqueues jobs, reads queue statistics and looks jobs up.

Every call is synchronous. A request that gets no answer in time, an
`unavailable` or `overloaded` answer, or a broker that stands by is sent
again, with the same job ids, so a job is written once however often it is
resent (docs/protocol.md §3.2)."""

from __future__ import annotations

import itertools
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence, Union

import zmq

from . import protocol
from ._connection import CurveKeys, Endpoints, open_dealer
from .job import job_document
from .protocol import EnqueueResult, EnqueueStatus, QueueStats, Type


class DueqError(Exception):
    """The broker answered ERROR; `code` is one of docs/protocol.md §5."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Rejected(DueqError):
    """The broker refused a job (bad name, payload too large, ...)."""


@dataclass
class AdminResult:
    """An ADMIN_REPLY: rows (maps of str), what was done, and where a paged listing goes on."""
    rows: list[dict[str, str]]
    summary: str
    next: str = ""


@dataclass
class FlowJob:
    """A job of a flow (docs/flows.md) and the children it waits for. `on_failure` says
    what a child's death or cancel does to its parent: "fail_parent" (the parent goes
    dead), "ignore" (it runs as if the child were done) or "proceed" (it runs and sees
    the failure among its children); not used for the root."""
    job: "Job"
    children: list["FlowJob"] = field(default_factory=list)
    on_failure: str = "fail_parent"


_ON_FAILURE = {"fail_parent": 1, "ignore": 2, "proceed": 3}


@dataclass
class GroupResult:
    """How a flow or batch request went: status "accepted", "duplicate" (the job at
    `job_index` exists: nothing was stored), "rejected" (`reason`), "no_batch",
    "batch_closed", "batch_exists" or "batch_full"; `ids` are the request's job ids
    in the order sent (a flow: each parent before its children, depth first)."""
    status: str
    reason: str
    ids: list[str]
    job_index: int = -1


@dataclass
class Job:
    """A job to enqueue. `due_ms` is milliseconds since the Unix epoch (UTC),
    0 for now; 0 for `max_attempts` and the backoffs takes the queue's defaults.
    `key` (up to 128 bytes; a str is sent as its UTF-8) groups the job with
    others of its key for per-key order and limits (docs/keys.md); empty: none.
    `unique_key` makes the job unique (docs/keys.md): while it holds the key, a
    new job with the same one is answered duplicate with this job's id
    (EnqueueResult.existing_id). `unique_until`: "waiting", "started", "done"
    (the default), "period" or "debounce"; `unique_for` (seconds) holds it that
    long after the enqueue ("period", the default with it) or bounds how long
    debounces may delay it ("debounce": while it is scheduled, a new job with
    its unique key gives it its payload and due time instead)."""
    queue: str
    type: str
    payload: bytes = b""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    due_ms: int = 0
    max_attempts: int = 0
    backoff_base_ms: int = 0
    backoff_cap_ms: int = 0
    key: Union[str, bytes] = b""
    unique_key: Union[str, bytes] = b""
    unique_until: str = ""
    unique_for: float = 0.0
    start_by_ms: int = 0  # never started after this (Unix ms); 0: none (docs/jobs.md)
    # W3C trace context (docs/jobs.md, "Tracing"): the caller's span, handed
    # to the job's handler (Job.traceparent). "": none.
    traceparent: str = ""
    tracestate: str = ""

    def wire(self) -> list[Any]:
        fields = [self.queue, self.id, self.type, self.payload, self.due_ms, self.max_attempts, self.backoff_base_ms,
                  self.backoff_cap_ms]
        key = self.key.encode() if isinstance(self.key, str) else bytes(self.key)
        if self.unique_key:
            until = self.unique_until or ("period" if self.unique_for else "done")
            if until not in _UNIQUE_UNTIL:
                raise ValueError(f"unique_until: waiting, started, done, period or debounce, not {until!r}")
            ukey = self.unique_key.encode() if isinstance(self.unique_key, str) else bytes(self.unique_key)
            fields += [key, ukey, _UNIQUE_UNTIL[until], int(self.unique_for * 1000)]
        elif self.unique_until or self.unique_for:
            raise ValueError("unique_until and unique_for need a unique_key")
        elif self.start_by_ms or self.traceparent:
            fields += [key, b"", 0, 0]  # the unique fields, as none, come before the deadline
        elif key:  # left out without one: a broker before 0.7 reads exactly 8 fields the same
            fields.append(key)
        if self.tracestate and not self.traceparent:
            raise ValueError("tracestate needs a traceparent")
        if self.start_by_ms or self.traceparent:
            fields.append(int(self.start_by_ms))
        if self.traceparent:
            fields += [self.traceparent, self.tracestate]
        return fields


# Looked up once: a failed import is not cached by Python, and trying it again
# on every enqueue cost 60 µs each.
try:
    from opentelemetry import propagate as _propagate  # type: ignore[import]
except ImportError:
    _propagate = None


def current_trace_context() -> tuple[str, str]:
    """The W3C traceparent and tracestate of the current OpenTelemetry span, as
    its propagator writes them; ("", "") without opentelemetry or a span."""
    if _propagate is None:
        return "", ""
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return carrier.get("traceparent", ""), carrier.get("tracestate", "")


# The wire's unique_until (docs/protocol.md).
_UNIQUE_UNTIL = {"waiting": 1, "started": 2, "done": 3, "period": 4, "debounce": 5}


# One ENQUEUE stays within the broker's limits: 10,000 jobs, and 8 MiB of
# payload (its per-round budget for one peer, so one frame is never turned away).
_BATCH_PAYLOAD_BYTES = 8 << 20
_RESEND_AFTER_S = 1.0


class Producer:
    def __init__(self, brokers: Union[str, Sequence[str]], *, keys: Optional[CurveKeys] = None,
                 timeout: float = 30.0, context: Optional[zmq.Context] = None) -> None:  # type: ignore[type-arg]
        self._endpoints = Endpoints(brokers)
        self._keys = keys
        self._timeout = timeout
        self._context = context or zmq.Context.instance()
        self._socket = open_dealer(self._context, self._endpoints.current, None, keys)
        self._request_ids = itertools.count(random.randrange(1, 1 << 48))

    def close(self) -> None:
        self._socket.close(0)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def enqueue(self, queue: str, type: str, payload: Union[bytes, str] = b"", *, id: Optional[str] = None,
                due_ms: int = 0, delay: Optional[float] = None, max_attempts: int = 0,
                key: Union[str, bytes] = b"", unique_key: Union[str, bytes] = b"", unique_until: str = "",
                unique_for: float = 0.0, start_by_ms: int = 0, traceparent: Optional[str] = None,
                tracestate: str = "") -> EnqueueResult:
        """Enqueues one job, due at `due_ms` or after `delay` seconds; raises Rejected when refused.
        The result is `accepted`, or `duplicate` when a job with this id exists (or, with
        `existing_id`, one holds its unique key). `key` and the unique fields: see Job.
        `start_by_ms`: the job never starts after this, and goes dead "expired" (docs/jobs.md).
        `traceparent` and `tracestate`: the caller's W3C trace context, handed to the handler;
        left out, the current OpenTelemetry span's when opentelemetry is installed."""
        if traceparent is None:
            traceparent, tracestate = current_trace_context()
        if delay is not None:
            due_ms = int(time.time() * 1000 + delay * 1000)
        job = Job(queue, type, payload.encode() if isinstance(payload, str) else payload, id or uuid.uuid4().hex,
                  due_ms, max_attempts, key=key, unique_key=unique_key, unique_until=unique_until,
                  unique_for=unique_for, start_by_ms=start_by_ms, traceparent=traceparent, tracestate=tracestate)
        result = self.enqueue_many([job])[0]
        if result.status == EnqueueStatus.REJECTED:
            raise Rejected("rejected", result.reason)
        return result

    def enqueue_many(self, jobs: Iterable[Job]) -> list[EnqueueResult]:
        """Enqueues jobs in as few frames as the limits allow; one result per job, in order."""
        results: list[EnqueueResult] = []
        batch: list[Job] = []
        payload_bytes = 0
        for job in jobs:
            if batch and (len(batch) == protocol.MAX_BATCH or payload_bytes + len(job.payload) > _BATCH_PAYLOAD_BYTES):
                results += self._enqueue_batch(batch)
                batch, payload_bytes = [], 0
            batch.append(job)
            payload_bytes += len(job.payload)
        if batch:
            results += self._enqueue_batch(batch)
        return results

    def _enqueue_batch(self, jobs: list[Job]) -> list[EnqueueResult]:
        done: dict[str, EnqueueResult] = {}
        waiting = list(jobs)
        deadline = time.monotonic() + self._timeout
        while waiting:
            _, body = self._request(Type.ENQUEUE, lambda rid: [rid, [j.wire() for j in waiting]], Type.ENQUEUE_REPLY,
                                    deadline)
            _, results, retry_after_ms = protocol.read_enqueue_reply(body)
            overloaded = set()
            for result in results:
                if result.status == EnqueueStatus.OVERLOADED:
                    overloaded.add(result.id)
                else:
                    done[result.id] = result
            waiting = [j for j in waiting if j.id in overloaded]
            if waiting:
                self._pause(retry_after_ms, deadline)
        return [done[j.id] for j in jobs]

    def stats(self) -> list[QueueStats]:
        """One row per queue the broker knows."""
        _, body = self._request(Type.STATS_REQUEST, lambda rid: [rid], Type.STATS_REPLY,
                                time.monotonic() + self._timeout)
        return protocol.read_stats_reply(body)[1]

    def job(self, id: str, queue: str = "") -> Optional[dict[str, Any]]:
        """The job's document (docs/jobs.md), as `dueq job --json` prints it, or None."""
        fields = self.job_fields(id, queue)
        return job_document(fields) if fields is not None else None

    def job_fields(self, id: str, queue: str = "") -> Optional[dict[str, str]]:
        """The job's fields as the broker sends them (docs/protocol.md, JOB_REPLY), or None.

        Values that are not UTF-8 come back with their bytes as surrogate escapes
        (value.encode("utf-8", "surrogateescape") gives them back)."""
        _, body = self._request(Type.JOB_REQUEST, lambda rid: [rid, id, queue], Type.JOB_REPLY,
                                time.monotonic() + self._timeout)
        _, found, fields = protocol.read_job_reply(body)
        return fields if found else None

    # -- operator commands (docs/protocol.md, ADMIN_REQUEST)

    def admin(self, op: str, queue: str = "", ids: Sequence[str] = (), *, args: Optional[dict[str, Union[str, bytes]]] = None,
              limit: int = 0, older_than_ms: int = 0) -> AdminResult:
        """Runs one ADMIN operation (the key must have the admin role)."""
        wire_args = dict(args or {})
        _, body = self._request(Type.ADMIN_REQUEST,
                                lambda rid: [rid, op, queue, list(ids), older_than_ms, limit, wire_args],
                                Type.ADMIN_REPLY, time.monotonic() + self._timeout)
        _, rows, summary, next_ = protocol.read_admin_reply(body)
        return AdminResult(rows, summary, next_)

    # -- flows and batches (docs/flows.md): each request is stored whole or not at all

    def enqueue_flow(self, root: FlowJob) -> GroupResult:
        """Enqueues a tree of jobs of the root's queue: each parent runs once all its children
        settled, at its own due time if later. At most 1,000 jobs and 4 levels."""
        queue = root.job.queue
        jobs: list[list[Any]] = []

        def add(node: FlowJob, parent: int) -> None:
            if node.on_failure not in _ON_FAILURE:
                raise ValueError(f"on_failure: fail_parent, ignore or proceed, not {node.on_failure!r}")
            if node.job.queue not in ("", queue):
                raise ValueError("every job of a flow is in its root's queue")
            node.job.queue = queue
            jobs.append([node.job.wire(), parent, _ON_FAILURE[node.on_failure] if parent else 0, 0])
            number = len(jobs)
            for child in node.children:
                add(child, number)

        add(root, 0)
        return self._group(queue, "", 0, False, jobs)

    def open_batch(self, queue: str, batch_id: str, jobs: Iterable[Job] = (), *, on_success: Optional[Job] = None,
                   on_complete: Optional[Job] = None, close: bool = False) -> GroupResult:
        """Opens batch `batch_id` with its callbacks and first members: `on_success` runs once
        every member is done (it is cancelled if one is not), `on_complete` once every member
        settled, both after the batch is closed."""
        wire: list[list[Any]] = []
        for role, callback in ((1, on_success), (2, on_complete)):
            if callback is not None:
                callback.queue = callback.queue or queue
                wire.append([callback.wire(), 0, 0, role])
        wire += self._members(queue, jobs)
        return self._group(queue, batch_id, 1, close, wire)

    def add_to_batch(self, queue: str, batch_id: str, jobs: Iterable[Job], *, close: bool = False) -> GroupResult:
        """Adds members to an open batch (at most 1,000 a call), and closes it with `close`."""
        return self._group(queue, batch_id, 2, close, self._members(queue, jobs))

    def close_batch(self, queue: str, batch_id: str) -> GroupResult:
        """Closes a batch: it takes no more members, and its callbacks run once every one settled."""
        return self._group(queue, batch_id, 2, True, [])

    def batch_status(self, queue: str, batch_id: str, after: str = "", limit: int = 50) -> dict[str, Any]:
        """A batch's status (kind, state, open, total, pending, done, dead, cancelled,
        success, complete, settled_ms), its members (member, member_state, result, error)
        a page at a time, and `next` (where the next page starts; "" after the last)."""
        return self._group_view(queue, {"batch": batch_id}, after, limit)

    def children(self, queue: str, parent_id: str, after: str = "", limit: int = 50) -> dict[str, Any]:
        """A flow parent's status and its children's states and results, as batch_status."""
        return self._group_view(queue, {"parent": parent_id}, after, limit)

    @staticmethod
    def _members(queue: str, jobs: Iterable[Job]) -> list[list[Any]]:
        out = []
        for job in jobs:
            job.queue = job.queue or queue
            out.append([job.wire(), 0, 0, 0])
        return out

    def _group(self, queue: str, batch_id: str, action: int, close: bool, jobs: list[list[Any]]) -> GroupResult:
        if len(jobs) > protocol.MAX_GROUP_JOBS:
            raise ValueError(f"a flow or batch request holds at most {protocol.MAX_GROUP_JOBS} jobs")
        ids = [j[0][1] for j in jobs]
        deadline = time.monotonic() + self._timeout
        while True:
            _, body = self._request(Type.GROUP_ENQUEUE, lambda rid: [rid, queue, batch_id, action, close, jobs],
                                    Type.GROUP_ENQUEUE_REPLY, deadline)
            _, status, reason, index, retry_after_ms = protocol.read_group_enqueue_reply(body)
            if status != "overloaded" or time.monotonic() >= deadline:
                return GroupResult(status, reason, ids, index)
            self._pause(retry_after_ms, deadline)

    def _group_view(self, queue: str, named: dict[str, str], after: str, limit: int) -> dict[str, Any]:
        args: dict[str, Union[str, bytes]] = {**named, "limit": str(limit)}
        if after:
            args["after"] = after
        result = self.admin("group", queue, args=args)
        view: dict[str, Any] = dict(result.rows[0]) if result.rows else {}
        view["members"] = result.rows[1:]
        view["next"] = result.next
        return view

    # -- changing one waiting job (docs/jobs.md, "Changing a waiting job"); a job
    #    that is running or finished raises DueqError with code "conflict"

    def reschedule(self, id: str, due_ms: int, queue: str = "") -> None:
        """Moves a waiting job's due time (at or before now: ready at once)."""
        self.admin("job_reschedule", queue, [id], args={"at_ms": str(max(0, int(due_ms)))})

    def run_now(self, id: str, queue: str = "") -> None:
        """Makes a waiting job ready to run now."""
        self.admin("job_reschedule", queue, [id], args={"now": "1"})

    def edit(self, id: str, payload: Union[str, bytes], version: str, queue: str = "") -> str:
        """Replaces a waiting job's payload if its version (its document's "version") is
        still `version`; returns the new version. Raises DueqError "conflict" when the job
        changed since it was read."""
        data = payload.encode() if isinstance(payload, str) else bytes(payload)
        result = self.admin("job_edit", queue, [id], args={"payload": data, "version": version})
        if not result.rows or "version" not in result.rows[0]:
            raise DueqError("internal", "job_edit: the broker's reply names no version")
        return result.rows[0]["version"]

    # -- waiting for a job's end (docs/jobs.md, "Results and waiting")

    def wait(self, id: str, queue: str, timeout: float = 30.0) -> protocol.JobEnd:
        """Waits up to `timeout` seconds for the job to end: its JobEnd's state is done
        (with .result), dead (with .error) or cancelled; pending when it has not ended
        by then, unknown when the queue holds no such job. Goes on at the broker that
        leads across a restart or a take-over."""
        deadline = time.monotonic() + max(0.0, timeout)
        # Each WAIT is answered within 3/4 of a request's timeout, so that a
        # silent broker is told from a long wait.
        longest_ms = max(0, min(protocol.MAX_WAIT_MS, int(self._timeout * 750) - 100))
        while True:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            wait_ms = min(left_ms, longest_ms)
            try:
                _, body = self._request(Type.WAIT, lambda rid: [rid, queue, id, wait_ms], Type.WAIT_REPLY,
                                        time.monotonic() + self._timeout)
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise
                continue
            end = protocol.read_wait_reply(body)[1]
            if end.state != "pending" or time.monotonic() >= deadline:
                return end

    # -- one request, answered or resent until the deadline

    def _request(self, type_: Type, body: Any, reply_type: Type, deadline: float) -> tuple[Type, list[Any]]:
        request_id = next(self._request_ids)
        frame = protocol.encode(type_, body(request_id))
        while True:
            self._socket.send(frame)
            resend_at = min(deadline, time.monotonic() + _RESEND_AFTER_S)
            while (left := resend_at - time.monotonic()) > 0:
                if not self._socket.poll(int(left * 1000) + 1):
                    continue
                try:
                    got_type, got = protocol.decode(self._socket.recv(), reply=True)
                except protocol.BadFrame:
                    continue
                if got_type == reply_type and got and got[0] == request_id:
                    return got_type, got
                if got_type != Type.ERROR:
                    continue
                error = protocol.ErrorReply.read(got)
                # Errors no request can be named in come with request id 0.
                if error.request_id not in (0, request_id):
                    continue
                if error.code == "not_leader":
                    self._move(error.message)
                elif error.code in ("unavailable", "overloaded"):
                    self._pause(error.retry_after_ms, deadline)
                else:
                    raise DueqError(error.code, error.message)
                break
            else:
                silent = self._endpoints.current
                # Left also when the deadline passed: the next request
                # starts with the next broker, not the one that let this
                # one time out.
                if len(self._endpoints.all) > 1:
                    self._move("")
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"no answer from {silent} in {self._timeout} s")

    def _pause(self, retry_after_ms: int, deadline: float) -> None:
        time.sleep(max(0.0, min(max(retry_after_ms, 10) / 1000, deadline - time.monotonic())))

    def _move(self, not_leader_message: str) -> None:
        """To the leader a standby named (added to the list when missing), else to the next endpoint."""
        named = next((w for w in not_leader_message.replace(",", " ").replace(";", " ").split() if "://" in w), "")
        self._endpoints.learn(named)
        if not self._endpoints.move_to(named) and self._endpoints.advance():
            time.sleep(0.1)
        self._socket.close(0)
        self._socket = open_dealer(self._context, self._endpoints.current, None, self._keys)
