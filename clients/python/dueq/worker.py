"""Worker: runs jobs by type on a pool of threads, as docs/protocol.md §3.3
asks of a worker.

One thread (the one that calls `run`) owns the broker connection: it says
HELLO, confirms every TASKS frame with RECEIVED before it starts a job, checks
each payload's checksum, announces jobs whose `start_check` asks for it
(STARTING) and starts them only once the broker says `go`, heartbeats the
jobs it holds, sends results and keeps them until CONFIRM (resent after
every new WELCOME), and moves between broker endpoints when one goes quiet.
Handler threads only run handlers."""

from __future__ import annotations

import collections
import logging
import os
import signal
import socket as socket_module
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence, Union

import zmq

from . import protocol
from ._connection import CurveKeys, Endpoints, open_dealer
from .job import iso_time
from .protocol import JobRef, Outcome, Result, Task, Type

log = logging.getLogger("dueq.worker")

_OUTCOME_WORDS = {Outcome.DONE: "done", Outcome.FAILED: "failed", Outcome.FAILED_FINAL: "failed for good",
                  Outcome.CANCELLED: "cancelled", Outcome.SNOOZED: "snoozed", Outcome.EXPIRED: "expired"}

_HELLO_ANSWER_S = 1.0  # no WELCOME this long after HELLO: HELLO again, at the next endpoint if any
_RESULT_BATCH = 1000


class Fail(Exception):
    """Raised by a handler: the job fails for good (dead letters), no retry."""


class Snooze(Exception):
    """Raised by a handler: run the job again after `seconds` (or at `until`, Unix
    seconds, from this machine's clock), with no attempt used and nothing added to
    its error log. A job snoozed more than its queue's max_snoozes (100 by default)
    goes dead instead."""

    def __init__(self, seconds: float = 0.0, *, until: Optional[float] = None, reason: str = "") -> None:
        super().__init__(reason or "snoozed")
        delay = (until - time.time()) if until is not None else seconds
        self.delay_ms = max(0, int(delay * 1000))
        self.reason = reason


def _cut_utf8(text: bytes, limit: int) -> bytes:
    """`text` cut to at most `limit` bytes, not inside a UTF-8 character."""
    if len(text) <= limit:
        return text
    cut = limit
    while cut > 0 and text[cut] & 0xC0 == 0x80:
        cut -= 1
    return text[:cut]


class _ProgressBoard:
    """The latest progress report of each running delivery (by token), shared
    by handler threads and the connection thread, which sends what changed
    with each heartbeat: many reports between two cost one item."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, JobRef] = {}
        self._latest: dict[int, tuple[int, bytes]] = {}
        self._changed: dict[int, None] = {}  # insertion-ordered set

    def open(self, ref: JobRef) -> None:
        with self._lock:
            self._open[ref.token] = ref

    def close(self, token: int) -> None:
        with self._lock:
            self._open.pop(token, None)
            self._latest.pop(token, None)
            self._changed.pop(token, None)

    def report(self, token: int, percent: int, text: bytes) -> None:
        with self._lock:
            if token in self._open:
                self._latest[token] = (percent, text)
                self._changed[token] = None

    def take_changed(self) -> list[list[object]]:
        with self._lock:
            items = [[self._open[t].queue, self._open[t].id, t, *self._latest[t]] for t in self._changed]
            self._changed.clear()
            return items

    def mark_all_changed(self) -> None:
        with self._lock:
            self._changed = dict.fromkeys(self._latest)


@dataclass
class Job:
    """What a handler gets."""
    queue: str
    id: str
    type: str
    payload: bytes
    attempt: int
    max_attempts: int
    due_ms: int
    created_ms: int
    token: int
    key: bytes = b""  # the key it was enqueued with (empty: none)
    # The W3C trace context it was enqueued with ("": none; docs/jobs.md,
    # "Tracing"): start the handler's span as a child of it.
    traceparent: str = ""
    tracestate: str = ""
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _board: Optional[_ProgressBoard] = field(default=None, repr=False)

    @property
    def cancelled(self) -> bool:
        """True once the job was cancelled while it ran: the handler should stop."""
        return self._cancel.is_set()

    def progress(self, percent: int, text: Union[str, bytes] = b"") -> None:
        """Tells how far the handler got: `percent` (clamped to 0..100) and a
        short text (cut to 256 bytes). Cheap to call often: the latest report
        goes to the broker with the next heartbeat; `dueq job`, `dueq workers`
        and the dashboard show it while the job runs."""
        if self._board is None:
            return
        raw = text.encode() if isinstance(text, str) else bytes(text)
        self._board.report(self.token, max(0, min(100, int(percent))),
                           _cut_utf8(raw, protocol.MAX_PROGRESS_TEXT))


# A handler may return its result (bytes or str, at most 64 KiB; None for none).
Handler = Callable[[Job], Union[None, bytes, str]]
Key = tuple[str, str]


class Worker:
    def __init__(self, brokers: Union[str, Sequence[str]], queues: Union[Sequence[str], Mapping[str, int]], *,
                 concurrency: int = 4, prefetch: Optional[int] = None, strict: bool = False,
                 worker_id: Optional[str] = None, keys: Optional[CurveKeys] = None,
                 drain_timeout: float = 30.0, log_jobs: bool = True) -> None:
        """`queues` is a list of names, or a map of name to weight (1..1000);
        with `strict`, jobs come from the first queue, in order, that has any.
        With `log_jobs` (and the "dueq.worker" logger at INFO) each job's
        start and end is logged: type, attempt, time taken, outcome."""
        self._queues = list(queues)
        self._weights = [int(queues[q]) for q in self._queues] if isinstance(queues, Mapping) else []
        if not self._queues:
            raise ValueError("no queue given")
        if any(not 1 <= w <= protocol.MAX_WEIGHT for w in self._weights):
            raise ValueError("a weight is 1..1000")
        if concurrency < 1:
            raise ValueError("concurrency is at least 1")
        self._concurrency = concurrency
        self._capacity = min(protocol.MAX_CAPACITY, concurrency + (concurrency if prefetch is None else prefetch))
        self._strict = strict
        self._worker_id = worker_id or f"{socket_module.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._endpoints = Endpoints(brokers)
        self._keys = keys
        self._drain_timeout = drain_timeout
        self._log_jobs = log_jobs
        self._handlers: dict[str, Handler] = {}
        self._context = zmq.Context.instance()
        self._socket: Optional[zmq.Socket] = None  # type: ignore[type-arg]
        self._poller = zmq.Poller()

        # The connection thread's own state.
        self._held: dict[Key, Task] = {}              # received, no result yet
        self._to_announce: collections.deque[Task] = collections.deque()
        self._held_back: collections.deque[Task] = collections.deque()  # unannounced, waiting for a start_check 2 task
        self._awaiting_go: dict[Key, Task] = {}       # STARTING sent, no START_REPLY yet
        # Announced deliveries (by job and token: a newer delivery of a job may
        # come while an older one is announced), with their start_check, until
        # their result is confirmed, the broker drops them, or they turn stale.
        self._announced: dict[tuple[Key, int], int] = {}
        self._unconfirmed: dict[Key, Result] = {}     # result sent, no CONFIRM yet
        self._jobs: dict[Key, Job] = {}               # what handlers got, for CANCEL
        self._heartbeat_ms = 1000
        self._welcomed = False
        self._heartbeat_now = False
        self._unanswered_hellos = 0
        self._hello_sent = 0.0
        self._last_heard = 0.0
        self._draining = False
        self._drain_deadline = 0.0
        self._confirm_deadline: Optional[float] = None

        # Shared with handler threads, under _lock.
        self._lock = threading.Lock()
        self._ready_cv = threading.Condition(self._lock)
        self._ready: collections.deque[Task] = collections.deque()  # may start now
        self._running: set[Key] = set()
        self._closing = False
        self._finished: collections.deque[tuple[Task, Result]] = collections.deque()
        self._progress = _ProgressBoard()
        self._wake_read, self._wake_write = os.pipe()
        self._stop_requested = threading.Event()

    @property
    def worker_id(self) -> str:
        return self._worker_id

    def handle(self, job_type: str) -> Callable[[Handler], Handler]:
        """Decorator: `@worker.handle("email")` runs the function for jobs of that type."""
        def register(fn: Handler) -> Handler:
            self._handlers[job_type] = fn
            return fn
        return register

    def stop(self) -> None:
        """Drain and return from `run` (any thread, or a signal handler)."""
        self._stop_requested.set()
        os.write(self._wake_write, b"s")

    def run(self) -> None:
        """Works until `stop`, SIGTERM or SIGINT, then drains: hands back jobs
        not started, finishes the running ones, and returns."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        threads = [threading.Thread(target=self._handler_loop, name=f"dueq-handler-{i}", daemon=True)
                   for i in range(self._concurrency)]
        for t in threads:
            t.start()
        try:
            self._connect()
            self._loop()
        finally:
            with self._lock:
                self._closing = True
                self._ready_cv.notify_all()
            if self._socket is not None:
                self._socket.close(0)
            os.close(self._wake_read)
            os.close(self._wake_write)

    # -- handler threads

    def _handler_loop(self) -> None:
        while True:
            with self._lock:
                while not self._ready and not self._closing:
                    self._ready_cv.wait()
                if self._closing:
                    return
                task = self._ready.popleft()
                key = (task.queue, task.id)
                self._running.add(key)
                job = self._jobs[key]
            self._progress.open(task.ref)
            try:
                result = self._execute_logged(task, job)
            finally:
                self._progress.close(task.token)
            with self._lock:
                self._running.discard(key)
                self._finished.append((task, result))
            os.write(self._wake_write, b"r")

    def _execute_logged(self, task: Task, job: Job) -> Result:
        if task.start_by_ms and time.time() * 1000 > task.start_by_ms:
            # Too late to matter: not started (docs/jobs.md, start-by deadlines).
            if self._log_jobs:
                log.info("job %r expired: not started (queue %r, type %r)", job.id, job.queue, job.type)
            return Result(task.ref, Outcome.EXPIRED, f"expired: not started by {iso_time(task.start_by_ms)}")
        if not (self._log_jobs and log.isEnabledFor(logging.INFO)):
            return self._execute(task, job)
        log.info("job %r started: queue %r, type %r, attempt %d of %d", job.id, job.queue, job.type, job.attempt,
                 job.max_attempts)
        started = time.monotonic()
        result = self._execute(task, job)
        error = result.error.splitlines()[-1][:200] if result.error else ""
        log.info("job %r %s in %d ms (queue %r, type %r, attempt %d)%s", job.id, _OUTCOME_WORDS[result.outcome],
                 (time.monotonic() - started) * 1000, job.queue, job.type, job.attempt, f": {error}" if error else "")
        return result

    def _execute(self, task: Task, job: Job) -> Result:
        handler = self._handlers.get(task.type)
        if handler is None:
            return Result(task.ref, Outcome.FAILED, f"no handler for job type {task.type!r}")
        try:
            returned = handler(job)
        except Fail as error:
            return Result(task.ref, Outcome.CANCELLED if job.cancelled else Outcome.FAILED_FINAL, str(error))
        except Snooze as snooze:
            if job.cancelled:
                return Result(task.ref, Outcome.CANCELLED, snooze.reason)
            return Result(task.ref, Outcome.SNOOZED, snooze.reason, snooze.delay_ms)
        except Exception:
            return Result(task.ref, Outcome.CANCELLED if job.cancelled else Outcome.FAILED,
                          traceback.format_exc(limit=5))
        if job.cancelled:
            return Result(task.ref, Outcome.CANCELLED)
        result = returned.encode() if isinstance(returned, str) else bytes(returned) if returned is not None else b""
        if len(result) > protocol.MAX_RESULT_BYTES:
            return Result(task.ref, Outcome.FAILED_FINAL,
                          f"its result of {len(result)} bytes is over the {protocol.MAX_RESULT_BYTES}-byte limit")
        return Result(task.ref, Outcome.DONE, result=result)

    # -- the connection thread

    def _send(self, type_: Type, body: list[object]) -> None:
        assert self._socket is not None
        try:
            self._socket.send(protocol.encode(type_, body), zmq.DONTWAIT)
        except zmq.Again:
            pass  # not connected yet: HELLO and heartbeats are sent again, results after WELCOME

    def _connect(self) -> None:
        if self._socket is not None:
            self._socket.close(0)
        self._socket = open_dealer(self._context, self._endpoints.current, self._worker_id.encode(), self._keys)
        self._poller = zmq.Poller()
        self._poller.register(self._socket, zmq.POLLIN)
        self._poller.register(self._wake_read, zmq.POLLIN)
        self._welcomed = False
        self._say_hello()

    def _say_hello(self) -> None:
        hello = protocol.Hello(self._worker_id, self._queues, self._capacity, [t.ref for t in self._held.values()],
                               socket_module.gethostname(), os.getpid(), self._weights, self._strict)
        self._send(Type.HELLO, hello.wire())
        self._hello_sent = time.monotonic()

    def _move(self) -> None:
        if self._endpoints.advance():
            time.sleep(0.1)
        log.info("moving to broker %s", self._endpoints.current)
        self._connect()

    def _loop(self) -> None:
        assert self._socket is not None
        next_heartbeat = time.monotonic()
        while True:
            now = time.monotonic()
            if self._stop_requested.is_set() and not self._draining:
                self._start_drain(now)
            if self._draining and self._drained(now):
                return
            if not self._welcomed and now - self._hello_sent >= _HELLO_ANSWER_S:
                if self._unanswered_hellos % 60 == 0:  # the first, then once a minute
                    log.warning("no WELCOME from %s within %.0f s (a broker down, or a key it refuses)",
                                self._endpoints.current, _HELLO_ANSWER_S)
                self._unanswered_hellos += 1
                if len(self._endpoints.all) > 1:
                    self._move()
                else:
                    self._say_hello()
            elif self._welcomed and now - self._last_heard > 3 * self._heartbeat_ms / 1000:
                log.warning("nothing from %s for three heartbeats", self._endpoints.current)
                if len(self._endpoints.all) > 1:
                    self._move()
                else:
                    # ZeroMQ reconnects by itself. A new socket would bring
                    # the same routing id while the broker may still hold the
                    # old connection (this process was stopped, say): the
                    # broker ignores such a duplicate, and every HELLO on it.
                    self._welcomed = False  # results wait for the WELCOME
                    self._say_hello()
            if self._welcomed and (now >= next_heartbeat or self._heartbeat_now):
                self._heartbeat_now = False
                self._send(Type.HEARTBEAT, [[t.ref.wire() for t in self._held.values()], self._capacity,
                                            self._draining])
                self._send_progress()
                next_heartbeat = now + self._heartbeat_ms / 1000
            wake_at = next_heartbeat if self._welcomed else self._hello_sent + _HELLO_ANSWER_S
            timeout = max(0.0, wake_at - time.monotonic())
            events = dict(self._poller.poll(int(min(timeout, 0.05 if self._draining else timeout) * 1000) + 1))
            if self._wake_read in events:
                os.read(self._wake_read, 4096)
            while self._socket.poll(0):
                self._on_frame(self._socket.recv(), time.monotonic())
            self._send_finished()
            self._announce()

    def _on_frame(self, data: bytes, now: float) -> None:
        try:
            type_, body = protocol.decode(data)
            if type_ == Type.TASKS:
                self._on_tasks(protocol.Tasks.read(body))
            elif type_ == Type.WELCOME:
                self._on_welcome(protocol.Welcome.read(body))
            elif type_ == Type.CONFIRM:
                for ref in protocol.read_confirm(body):
                    self._confirmed(ref)
            elif type_ == Type.START_REPLY:
                go, drop = protocol.read_start_reply(body)
                self._on_start_reply(go, drop)
            elif type_ == Type.CANCEL:
                self._on_cancel(protocol.read_cancel(body))
            elif type_ == Type.ERROR:
                self._on_error(protocol.ErrorReply.read(body))
            elif type_ == Type.PONG:
                protocol.read_pong(body)
            else:
                raise protocol.BadFrame(f"a worker gets no frame of type {type_.name}")
        except protocol.BadFrame as error:
            log.warning("dropped a malformed frame from the broker: %s", error)  # §3.1: whole, changing nothing
            return
        self._last_heard = now

    def _send_progress(self) -> None:
        items = self._progress.take_changed()
        for start in range(0, len(items), protocol.MAX_BATCH):
            self._send(Type.PROGRESS, [items[start:start + protocol.MAX_BATCH]])

    def _on_welcome(self, welcome: protocol.Welcome) -> None:
        self._progress.mark_all_changed()
        self._welcomed = True
        self._heartbeat_now = True  # until its first heartbeat a worker is a newcomer (protocol §3.3)
        self._unanswered_hellos = 0
        self._heartbeat_ms = welcome.heartbeat_ms
        log.info("welcomed by broker %s at %s", welcome.broker_id, self._endpoints.current)
        unconfirmed = list(self._unconfirmed.values())
        for start in range(0, len(unconfirmed), _RESULT_BATCH):
            self._send(Type.RESULTS, [[r.wire() for r in unconfirmed[start:start + _RESULT_BATCH]]])
        if self._awaiting_go:
            self._send(Type.STARTING, [[t.ref.wire() for t in self._awaiting_go.values()]])

    def _on_tasks(self, tasks: protocol.Tasks) -> None:
        self._send(Type.RECEIVED, [tasks.seq])  # before any of its jobs starts
        if self._draining:
            self._send(Type.BYE, [[t.ref.wire() for t in tasks.items]])
            return
        for task in tasks.items:
            key = (task.queue, task.id)
            held, result = self._held.get(key), self._unconfirmed.get(key)
            if (held is not None and held.token == task.token) or (result is not None and result.ref.token == task.token):
                # A delivery it holds, or ran, arriving again: started once only (protocol §3.3).
                log.warning("job %r delivered again with the same token %d: not started twice", task.id, task.token)
                continue
            if held is not None:
                self._replace(held)
            self._held[key] = task
            self._unconfirmed.pop(key, None)
            if protocol.checksum(task.payload) != task.payload_checksum:
                self._finish(task, Result(task.ref, Outcome.FAILED_FINAL,
                                          "payload corrupted: its XXH3-64 does not match payload_checksum"))
                continue
            with self._lock:
                self._jobs[key] = Job(task.queue, task.id, task.type, task.payload, task.attempt, task.max_attempts,
                                      task.due_ms, task.created_ms, task.token, task.key, task.traceparent,
                                      task.tracestate, _board=self._progress)
                if task.start_check == 0 and self._alone_pending():
                    self._held_back.append(task)
                elif task.start_check == 0:
                    self._ready.append(task)
                    self._ready_cv.notify()
                else:
                    self._to_announce.append(task)

    def _replace(self, older: Task) -> None:
        """A newer delivery of a job replaces the one held: the older one no
        longer starts (if its handler runs, its result is stale and dropped),
        and is no longer announced, so nothing waits for its START_REPLY or
        CONFIRM."""
        key = (older.queue, older.id)
        with self._lock:
            if older in self._ready:
                self._ready.remove(older)
            running = key in self._running
        for waiting in (self._to_announce, self._held_back):
            if older in waiting:
                waiting.remove(older)
        if self._awaiting_go.get(key) is older:
            del self._awaiting_go[key]
        if not running:
            self._announced.pop((key, older.token), None)

    def _alone_pending(self) -> bool:
        """A task with `start_check` 2 waits to be announced, or is announced
        and its result not confirmed: nothing else starts meanwhile, so that
        a crash names it alone."""
        return 2 in self._announced.values() or any(t.start_check == 2 for t in self._to_announce)

    def _announce(self) -> None:
        """STARTING for the announced tasks the pool can start soon. A task
        with `start_check` 2 is announced only when no other task runs and no
        other announced one awaits its CONFIRM, and nothing starts beside it."""
        if self._held_back and not self._alone_pending():
            with self._lock:
                self._ready.extend(self._held_back)
                self._ready_cv.notify_all()
            self._held_back.clear()
        if not self._to_announce or self._draining or 2 in self._announced.values():
            return
        with self._lock:
            busy = len(self._running) + len(self._ready)
        idle = self._concurrency - busy
        batch: list[Task] = []
        while self._to_announce and idle - len(self._awaiting_go) - len(batch) > 0:
            if self._to_announce[0].start_check == 2:
                if not batch and not self._announced and busy == 0:
                    batch.append(self._to_announce.popleft())
                break
            batch.append(self._to_announce.popleft())
        for task in batch:
            self._awaiting_go[(task.queue, task.id)] = task
            self._announced[((task.queue, task.id), task.token)] = task.start_check
        if batch:
            self._send_finished()  # what ran before is reported first
            self._send(Type.STARTING, [[t.ref.wire() for t in batch]])

    def _on_start_reply(self, go: list[JobRef], drop: list[JobRef]) -> None:
        for ref in go:
            key = (ref.queue, ref.id)
            task = self._awaiting_go.get(key)
            if task is None or task.token != ref.token:
                continue  # an older delivery's answer: the newer one awaits its own
            del self._awaiting_go[key]
            with self._lock:
                self._ready.appendleft(task)
                self._ready_cv.notify()
        for ref in drop:
            key = (ref.queue, ref.id)
            self._announced.pop((key, ref.token), None)
            waiting = self._awaiting_go.get(key)
            if waiting is not None and waiting.token == ref.token:
                del self._awaiting_go[key]
            task = self._held.get(key)
            if task is not None and task.token == ref.token:
                self._forget(task)

    def _on_cancel(self, ref: JobRef) -> None:
        key = (ref.queue, ref.id)
        task = self._held.get(key)
        if task is None or task.token != ref.token:
            return  # not a delivery it holds
        with self._lock:
            job = self._jobs.get(key)
            if key in self._running and job is not None:
                job._cancel.set()  # the handler is asked to stop; its end reports `cancelled`
                return
            if task in self._ready:
                self._ready.remove(task)
        if task in self._to_announce:
            self._to_announce.remove(task)
        if task in self._held_back:
            self._held_back.remove(task)
        if self._awaiting_go.get(key) is task:
            del self._awaiting_go[key]
        self._finish(task, Result(task.ref, Outcome.CANCELLED, "cancelled before it started"))

    def _on_error(self, error: protocol.ErrorReply) -> None:
        if error.code == "unknown_worker":
            self._welcomed = False  # the broker restarted or declared it lost; results follow WELCOME
            self._say_hello()
        elif error.code == "not_leader":
            log.info("%s stands by: %s", self._endpoints.current, error.message)
            self._move()
        else:
            log.warning("broker error %s: %s", error.code, error.message)

    def _finish(self, task: Task, result: Result) -> None:
        with self._lock:
            self._finished.append((task, result))

    def _send_finished(self) -> None:
        with self._lock:
            finished = list(self._finished)
            self._finished.clear()
        batch = []
        for task, result in finished:
            key = (task.queue, task.id)
            current = self._held.get(key)
            if current is None or current.token != task.token:
                # A newer delivery replaced it: its result is not sent, so no
                # CONFIRM ends its announcement.
                self._announced.pop((key, task.token), None)
                continue
            self._forget(task, keep_announced=True)
            self._unconfirmed[key] = result
            batch.append(result.wire())
        for start in range(0, len(batch), _RESULT_BATCH):
            if self._welcomed:
                self._send(Type.RESULTS, [batch[start:start + _RESULT_BATCH]])

    def _confirmed(self, ref: JobRef) -> None:
        key = (ref.queue, ref.id)
        result = self._unconfirmed.get(key)
        if result is not None and result.ref.token == ref.token:
            del self._unconfirmed[key]
        self._announced.pop((key, ref.token), None)

    def _forget(self, task: Task, keep_announced: bool = False) -> None:
        key = (task.queue, task.id)
        self._held.pop(key, None)
        with self._lock:
            self._jobs.pop(key, None)
        if not keep_announced:
            self._announced.pop((key, task.token), None)

    # -- draining

    def _start_drain(self, now: float) -> None:
        self._draining = True
        self._drain_deadline = now + self._drain_timeout
        with self._lock:
            unstarted = list(self._ready)
            self._ready.clear()
        unstarted += list(self._held_back) + list(self._to_announce) + list(self._awaiting_go.values())
        self._held_back.clear()
        self._to_announce.clear()
        self._awaiting_go.clear()
        for task in unstarted:
            self._forget(task)
        log.info("draining: handing back %d jobs not started", len(unstarted))
        self._send(Type.BYE, [[t.ref.wire() for t in unstarted]])
        self._send(Type.HEARTBEAT, [[t.ref.wire() for t in self._held.values()], self._capacity, True])

    def _drained(self, now: float) -> bool:
        with self._lock:
            running = bool(self._running) or bool(self._finished)
        if running and now < self._drain_deadline:
            return False
        if running:
            with self._lock:
                for key in self._running:
                    self._jobs[key]._cancel.set()
            log.warning("drain timeout: left %d running jobs to be re-delivered", len(self._running))
            return True
        # The last results wait briefly for their CONFIRM (a result applies at most once either way).
        if self._confirm_deadline is None:
            self._confirm_deadline = now + 2.0
        return not self._unconfirmed or now > self._confirm_deadline
