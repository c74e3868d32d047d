"""A Python worker for the tests: handlers noop, sleep (payload = ms), fail,
echo (returns its payload as the result), trace (returns its traceparent
and tracestate), crash and snooze_once (payload = ms: snoozes the first run of a job, done the
next), like dueq-example-worker; each start appends `id attempt token
start_us pid key` to --record (start_us: the wall clock in microseconds;
key: the job's key in hex, - for none)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time

import dueq


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", action="append", required=True)
    parser.add_argument("--queue", action="append", required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prefetch", type=int)
    parser.add_argument("--record", required=True)
    parser.add_argument("--broker-pub")
    parser.add_argument("--key")
    parser.add_argument("--worker-id")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    keys = dueq.CurveKeys.from_files(args.broker_pub, args.key) if args.key else None
    worker = dueq.Worker(args.broker, args.queue, concurrency=args.concurrency, prefetch=args.prefetch, keys=keys,
                         worker_id=args.worker_id)
    lock = threading.Lock()
    record = open(args.record, "a", buffering=1)

    def note(job: dueq.Job) -> None:
        with lock:
            record.write(f"{job.id} {job.attempt} {job.token} {time.time_ns() // 1000} {os.getpid()} {job.key.hex() or '-'}\n")

    @worker.handle("noop")
    def noop(job: dueq.Job) -> None:
        note(job)

    @worker.handle("sleep")
    def sleep(job: dueq.Job) -> None:
        note(job)
        ms = int(job.payload or b"0")
        start = time.monotonic()
        deadline = start + ms / 1000
        while time.monotonic() < deadline and not job.cancelled:
            slept = (time.monotonic() - start) * 1000
            job.progress(int(slept * 100 / ms), f"{job.id} slept {slept:.0f} of {ms} ms")
            time.sleep(0.005)

    # Reports progress many times (the last: 60%, its id and a byte that is
    # not UTF-8), then runs until the file its payload names exists.
    @worker.handle("progress")
    def progress(job: dueq.Job) -> None:
        note(job)
        for i in range(1000):
            job.progress(i // 20, f"step {i}")
        job.progress(60, job.id.encode() + b" \xff")
        go = job.payload.decode()
        while not os.path.exists(go) and not job.cancelled:
            time.sleep(0.01)

    @worker.handle("echo")
    def echo(job: dueq.Job) -> bytes:
        note(job)
        return job.payload

    # Returns the trace context it was handed, as its result.
    @worker.handle("trace")
    def trace(job: dueq.Job) -> str:
        note(job)
        return f"{job.traceparent} {job.tracestate}"

    @worker.handle("fail")
    def fail(job: dueq.Job) -> None:
        note(job)
        raise RuntimeError("failed on purpose")

    snoozed: set[str] = set()

    @worker.handle("snooze_once")
    def snooze_once(job: dueq.Job) -> None:
        note(job)
        with lock:
            first = job.id not in snoozed
            snoozed.add(job.id)
        if first:
            raise dueq.Snooze(int(job.payload or b"0") / 1000, reason="not yet")

    # A poison job: takes the whole worker process down with it.
    @worker.handle("crash")
    def crash(job: dueq.Job) -> None:
        note(job)
        os.kill(os.getpid(), signal.SIGKILL)

    worker.run()
    logging.info("drained and stopped")


if __name__ == "__main__":
    main()
