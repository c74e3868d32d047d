"""The Python package (clients/python) against a real broker, Redis and
C++ worker: each test names the rule of docs/protocol.md it checks."""

from __future__ import annotations

import base64
import collections
import contextlib
import io
import json
import os
import re
import signal
import sys
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

import support
from support import Deployment, eventually, read_records

import dueq


def ids_run(records: list[list[str]]) -> collections.Counter[str]:
    return collections.Counter(r[0] for r in records)


class PythonWorker(unittest.TestCase):
    def busy_python_worker(self, d: Deployment, record: Path, concurrency: int, prefetch: int, count: int,
                           sleep_ms: int) -> tuple[subprocess.Popen[bytes], list[dueq.NewJob]]:
        """A Python worker given `count` sleep jobs, once it runs as many as it has handlers."""
        worker = d.python_worker("--queue", "q", "--concurrency", str(concurrency), "--prefetch", str(prefetch),
                                 "--record", str(record))
        jobs = [dueq.NewJob("q", "sleep", str(sleep_ms).encode()) for _ in range(count)]
        with dueq.Producer(d.endpoint) as producer:
            producer.enqueue_many(jobs)
        self.assertTrue(eventually(lambda: len(read_records(record)) == concurrency, 10))
        return worker, jobs

    def test_a_python_worker_beside_a_cpp_worker_runs_every_job_once(self) -> None:
        d = Deployment(self)
        py_rec, cpp_rec = d.dir / "py.rec", d.dir / "cpp.rec"
        d.python_worker("--queue", "mixed", "--record", str(py_rec))
        d.cpp_worker("mixed", cpp_rec)
        with dueq.Producer(d.endpoint) as producer:
            jobs = [dueq.NewJob("mixed", "sleep", b"1") for _ in range(2000)]
            results = producer.enqueue_many(jobs)
            self.assertTrue(all(r.status == dueq.EnqueueStatus.ACCEPTED for r in results))
            self.assertTrue(eventually(lambda: producer.stats()[0].done == 2000, 60), producer.stats())
        records = read_records(py_rec) + read_records(cpp_rec)
        runs = ids_run(records)
        self.assertEqual(set(runs), {j.id for j in jobs})
        self.assertEqual(max(runs.values()), 1, "a job ran twice")
        self.assertGreater(len(read_records(py_rec)), 0, "the Python worker ran nothing")
        self.assertGreater(len(read_records(cpp_rec)), 0, "the C++ worker ran nothing")
        audit = d.dueq("audit")
        self.assertEqual(audit.returncode, 0, audit.stdout + audit.stderr)

    def test_keys_of_any_bytes_reach_the_python_worker_and_the_job_document(self) -> None:
        d = Deployment(self)
        record = d.dir / "keys.rec"
        d.python_worker("--queue", "k", "--record", str(record))
        with dueq.Producer(d.endpoint) as producer:
            producer.enqueue("k", "noop", id="text-key", key="tenant é")
            producer.enqueue("k", "noop", id="raw-key", key=b"\xff\x00a")
            producer.enqueue("k", "noop", id="no-key")
            producer.enqueue("k", "noop", id="later", key=b"\xff\x00a", delay=60)
            self.assertTrue(eventually(lambda: len(read_records(record)) == 3, 10))
            keys = {r[0]: r[5] for r in read_records(record)}
            self.assertEqual(keys, {"text-key": "tenant é".encode().hex(), "raw-key": "ff0061", "no-key": "-"})
            later = producer.job("later", "k")
            assert later is not None
            self.assertEqual(later["key"], {"encoding": "base64", "data": base64.b64encode(b"\xff\x00a").decode()})
            shown = subprocess.run([str(support.BIN / "dueq"), "--broker", d.endpoint, "job", "later", "--queue", "k",
                                    "--json"], check=True, capture_output=True)
            self.assertEqual(later, json.loads(shown.stdout), "one document in every view")
            with self.assertRaises(dueq.Rejected) as refused:
                producer.enqueue("k", "noop", key=b"k" * 129)
            self.assertIn("key exceeds 128 bytes", str(refused.exception))

    def test_sigkill_of_a_python_worker_redelivers_what_it_held(self) -> None:
        d = Deployment(self, ["--heartbeat", "200ms", "--worker-timeout", "1s"])
        py_rec, cpp_rec = d.dir / "py.rec", d.dir / "cpp.rec"
        worker, jobs = self.busy_python_worker(d, py_rec, concurrency=4, prefetch=4, count=8, sleep_ms=3000)
        with dueq.Producer(d.endpoint) as producer:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            d.cpp_worker("q", cpp_rec, concurrency=8)
            self.assertTrue(eventually(lambda: producer.stats()[0].done == 8, 20), producer.stats())
        self.assertEqual(set(ids_run(read_records(cpp_rec))), {j.id for j in jobs},
                         "every job the killed worker held, running or buffered, runs again elsewhere")

    def test_a_snoozed_job_runs_again_after_its_delay_as_the_same_attempt(self) -> None:
        d = Deployment(self)
        record = d.dir / "snooze.rec"
        d.python_worker("--queue", "sz", "--record", str(record))
        with dueq.Producer(d.endpoint) as producer:
            producer.enqueue("sz", "snooze_once", b"1200", id="later", max_attempts=1)
            self.assertTrue(eventually(lambda: (producer.job("later") or {}).get("state") == "done", 20))
        runs = [r for r in read_records(record) if r[0] == "later"]
        self.assertEqual([r[1] for r in runs], ["1", "1"], "a snooze uses no attempt (max_attempts 1)")
        self.assertGreaterEqual(int(runs[1][3]) - int(runs[0][3]), 1_200_000, "not before the delay it asked for")

    def test_a_handlers_result_is_kept_and_a_wait_returns_it_or_why_the_job_died(self) -> None:
        d = Deployment(self)
        record = d.dir / "results.rec"
        d.python_worker("--queue", "res", "--record", str(record))
        with dueq.Producer(d.endpoint) as producer:
            result = b"r\x00\xff"
            producer.enqueue("res", "echo", result, id="echoed", delay=0.3)
            end = producer.wait("echoed", "res", timeout=20)
            self.assertEqual((end.state, end.result), ("done", result))
            self.assertGreater(end.finished_ms, 0)
            job = producer.job("echoed", "res")
            assert job is not None
            self.assertEqual(job["result"], {"encoding": "base64", "data": "cgD/"})
            producer.enqueue("res", "echo", b"x" * (64 * 1024 + 1), id="too-big")
            big = producer.wait("too-big", "res", timeout=20)
            self.assertEqual((big.state, big.error), ("dead", "its result of 65537 bytes is over the 65536-byte limit"))
            producer.enqueue("res", "fail", b"boom", id="failing", max_attempts=1)
            failed = producer.wait("failing", "res", timeout=20)
            self.assertEqual(failed.state, "dead")
            self.assertIn("failed on purpose", failed.error)
            self.assertEqual(producer.wait("nobody", "res", timeout=5).state, "unknown")
            producer.enqueue("res", "noop", id="far", delay=3600)
            self.assertEqual(producer.wait("far", "res", timeout=0.3).state, "pending")

    def test_a_handlers_progress_is_shown_while_its_job_runs(self) -> None:
        d = Deployment(self)
        d.python_worker("--queue", "prog", "--record", str(d.dir / "progress.rec"))
        go = d.dir / "go"
        with dueq.Producer(d.endpoint) as producer:
            producer.enqueue("prog", "progress", str(go).encode(), id="p-1")
            self.assertTrue(eventually(lambda: ((producer.job("p-1", "prog") or {}).get("progress") or {}).get("percent")
                                       == 60, 20))
            job = producer.job("p-1", "prog")
            assert job is not None
            self.assertEqual(job["state"], "running")
            self.assertEqual(job["progress"]["text"], {"encoding": "base64", "data": "cC0xIP8="})
            self.assertIsNotNone(job["progress"]["at_ms"])
            shown = d.dueq("job", "p-1", "--queue", "prog")
            self.assertIn("progress:     60% p-1 \\xff", shown.stdout)
            self.assertIn("(60% p-1 \\xff)", d.dueq("workers").stdout)
            go.touch()
            self.assertEqual(producer.wait("p-1", "prog", timeout=20).state, "done")
            done = producer.job("p-1", "prog")
            assert done is not None
            self.assertIsNone(done["progress"])

    def test_a_trace_context_given_at_enqueue_reaches_the_handler_and_the_document(self) -> None:
        d = Deployment(self)
        d.python_worker("--queue", "tr", "--record", str(d.dir / "trace.rec"))
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        with dueq.Producer(d.endpoint) as producer:
            producer.enqueue("tr", "trace", id="t-1", traceparent=parent, tracestate="rojo=1")
            producer.enqueue("tr", "trace", id="t-2")  # no opentelemetry here: none from the context
            self.assertEqual(producer.wait("t-1", "tr", timeout=20).result, f"{parent} rojo=1".encode())
            self.assertEqual(producer.wait("t-2", "tr", timeout=20).result, b" ")
            producer.enqueue("tr", "trace", id="t-later", delay=3600, traceparent=parent, tracestate="rojo=1")
            job = producer.job("t-later", "tr")
            assert job is not None
            self.assertEqual((job["traceparent"], job["tracestate"]), (parent, "rojo=1"))
            with self.assertRaises(dueq.Rejected) as refused:
                producer.enqueue("tr", "trace", traceparent="00-not-a-trace-01")
            self.assertIn("traceparent", str(refused.exception))
            with self.assertRaises(ValueError):
                producer.enqueue("tr", "trace", traceparent="", tracestate="rojo=1")

    def test_a_job_not_started_by_its_deadline_goes_dead_expired(self) -> None:
        d = Deployment(self)
        record = d.dir / "late.rec"
        with dueq.Producer(d.endpoint) as producer:
            start_by = int(time.time() * 1000) + 300
            producer.enqueue("sb", "noop", id="late", start_by_ms=start_by)
            producer.enqueue("sb", "noop", id="on-time")
            job = producer.job("late")
            assert job is not None
            self.assertEqual(job["start_by_ms"], start_by)
            with self.assertRaises(dueq.Rejected):  # a deadline before its due time
                producer.enqueue("sb", "noop", delay=60, start_by_ms=start_by)
            time.sleep(0.5)  # past the deadline before any worker serves the queue
            d.python_worker("--queue", "sb", "--record", str(record))
            self.assertTrue(eventually(lambda: (producer.job("late") or {}).get("state") == "dead", 20))
            late = producer.job("late")
            assert late is not None
            self.assertTrue(str(late["last_error"]).startswith("expired: not started by"), late)
            self.assertTrue(eventually(lambda: (producer.job("on-time") or {}).get("state") == "done", 20))
            stats = {s.queue: s for s in producer.stats()}
            self.assertEqual((stats["sb"].expired, stats["sb"].died), (1, 1))
        self.assertEqual([r[0] for r in read_records(record)], ["on-time"])

    def test_a_stale_ack_changes_nothing(self) -> None:
        d = Deployment(self, ["--heartbeat", "200ms", "--worker-timeout", "1s"])
        rec = d.dir / "py.rec"
        first = d.python_worker("--queue", "q", "--record", str(rec), log="first.log")
        with dueq.Producer(d.endpoint) as producer:
            job = producer.enqueue("q", "sleep", b"1500")
            self.assertTrue(eventually(lambda: len(read_records(rec)) == 1, 10))
            first.send_signal(signal.SIGSTOP)  # silent past the worker timeout: declared lost
            self.assertTrue(eventually(lambda: "re-delivering" in d.log("broker.log"), 10))
            d.python_worker("--queue", "q", "--record", str(rec), log="second.log")
            self.assertTrue(eventually(lambda: producer.stats()[0].done == 1, 10), producer.stats())
            first.send_signal(signal.SIGCONT)  # finishes its old delivery and reports it
            self.assertTrue(eventually(lambda: producer.stats()[0].stale_acks >= 1, 10), producer.stats())
            stats = producer.stats()[0]
            self.assertEqual((stats.done, stats.dead, stats.in_flight), (1, 0, 0))
            fields = producer.job_fields(job.id, "q")
            self.assertEqual(fields, {"id": job.id, "queue": "q", "s": "done", "f": fields["f"]})  # type: ignore[index]
        tokens = {r[2] for r in read_records(rec)}
        self.assertEqual(len(tokens), 2, "the two deliveries had different fencing tokens")

    def test_sigterm_drains_hands_back_the_unstarted_and_finishes_the_running(self) -> None:
        d = Deployment(self)
        py_rec, cpp_rec = d.dir / "py.rec", d.dir / "cpp.rec"
        worker, jobs = self.busy_python_worker(d, py_rec, concurrency=2, prefetch=6, count=8, sleep_ms=600)
        with dueq.Producer(d.endpoint) as producer:
            worker.send_signal(signal.SIGTERM)
            self.assertEqual(worker.wait(10), 0)
            handed_back = re.search(r"handing back (\d+) jobs", d.log("py-worker.log"))
            assert handed_back is not None, d.log("py-worker.log")
            # The 6 it buffered (fewer if a TASKS frame was still on its way: a second BYE returns those).
            self.assertIn(int(handed_back.group(1)), range(1, 7))
            self.assertEqual(producer.stats()[0].done, 2, "the two running jobs finished and were confirmed")
            d.cpp_worker("q", cpp_rec, concurrency=8)
            self.assertTrue(eventually(lambda: producer.stats()[0].done == 8, 20), producer.stats())
        records = read_records(py_rec) + read_records(cpp_rec)
        self.assertEqual(sorted(ids_run(records).values()), [1] * 8)
        self.assertEqual({r[1] for r in records}, {"1"}, "a handed-back job uses no attempt")

    def test_a_key_not_on_the_allow_list_gets_nothing(self) -> None:
        tmp = Path(tempfile.mkdtemp(prefix="dueq-py-keys-"))
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", str(tmp)]))
        for name in ("broker", "worker", "producer", "admin", "stranger"):
            subprocess.run([str(support.BIN / "dueq"), "keygen", str(tmp / name)], check=True, capture_output=True)
        public = {n: (tmp / f"{n}.pub").read_text().split('"')[1] for n in ("worker", "producer", "admin")}
        (tmp / "allow.toml").write_text(
            f'[[key]]\nname = "worker"\npublic = "{public["worker"]}"\nrole = "worker"\nqueues = ["*"]\n'
            f'[[key]]\nname = "producer"\npublic = "{public["producer"]}"\nrole = "producer"\nqueues = ["*"]\n'
            f'[[key]]\nname = "admin"\npublic = "{public["admin"]}"\nrole = "admin"\n')
        d = Deployment(self, ["--curve-key", str(tmp / "broker.key"), "--allow-list", str(tmp / "allow.toml")])
        stranger_rec, worker_rec = d.dir / "stranger.rec", d.dir / "worker.rec"
        d.python_worker("--queue", "q", "--record", str(stranger_rec), "--broker-pub", str(tmp / "broker.pub"),
                        "--key", str(tmp / "stranger.key"), log="stranger.log")
        keys = dueq.CurveKeys.from_files(tmp / "broker.pub", tmp / "producer.key")
        admin_keys = dueq.CurveKeys.from_files(tmp / "broker.pub", tmp / "admin.key")
        with dueq.Producer(d.endpoint, keys=keys) as producer, dueq.Producer(d.endpoint, keys=admin_keys) as admin:
            jobs = [dueq.NewJob("q", "noop") for _ in range(20)]
            producer.enqueue_many(jobs)
            self.assertTrue(eventually(lambda: "no WELCOME" in d.log("stranger.log"), 5))
            time.sleep(1)
            self.assertEqual(read_records(stranger_rec), [])
            self.assertEqual(admin.stats()[0].waiting, 20, "nothing left the queue for the refused key")
            with self.assertRaises(dueq.DueqError) as refused:
                producer.stats()
            self.assertEqual(refused.exception.code, "refused", "a producer key may not read stats")
            d.python_worker("--queue", "q", "--record", str(worker_rec), "--broker-pub", str(tmp / "broker.pub"),
                            "--key", str(tmp / "worker.key"), log="worker.log")
            self.assertTrue(eventually(lambda: admin.stats()[0].done == 20, 10), admin.stats())
        self.assertEqual(set(ids_run(read_records(worker_rec))), {j.id for j in jobs})
        self.assertEqual(read_records(stranger_rec), [])

    def test_a_worker_given_several_endpoints_finds_the_leader(self) -> None:
        d = Deployment(self)
        standby_endpoint = f"tcp://127.0.0.1:{support.free_port()}"
        standby = d.spawn([str(support.BIN / "dueq-broker"), "--redis", f"redis://127.0.0.1:{d.redis_port}",
                           "--listen", standby_endpoint, "--log-level", "info"], "standby.log")
        self.assertTrue(eventually(lambda: "standing by" in d.log("standby.log") or standby.poll() is not None, 10),
                        d.log("standby.log"))
        dead = f"tcp://127.0.0.1:{support.free_port()}"
        rec = d.dir / "py.rec"
        d.python_worker("--queue", "q", "--record", str(rec), brokers=[dead, standby_endpoint, d.endpoint])
        with dueq.Producer([standby_endpoint, dead, d.endpoint]) as producer:  # not_leader names the leader
            producer.enqueue_many([dueq.NewJob("q", "noop") for _ in range(10)])
            self.assertTrue(eventually(lambda: producer.stats()[0].done == 10, 15), producer.stats())
        self.assertEqual(len(read_records(rec)), 10)
        log = d.log("py-worker.log")
        self.assertIn(f"moving to broker {standby_endpoint}", log, "no WELCOME from the dead endpoint: the next one")
        self.assertIn(f"{standby_endpoint} stands by", log)
        self.assertIn(f"moving to broker {d.endpoint}", log)
        # Given only the standby, a producer follows it to the leader it names.
        with dueq.Producer(standby_endpoint) as producer:
            self.assertEqual(producer.enqueue("q", "noop", id="through-standby").status, dueq.EnqueueStatus.ACCEPTED)
            self.assertEqual(producer._endpoints.all, [standby_endpoint, d.endpoint])


class PythonWorkerState(unittest.TestCase):
    """The worker's own bookkeeping, frames fed to it directly (no broker)."""

    def test_a_delivery_arriving_again_with_its_token_is_not_started_twice(self) -> None:
        """protocol.md 3.3: one delivery is started once, a newer one replaces it."""
        worker = dueq.Worker("tcp://127.0.0.1:1", ["q"], concurrency=2)
        sent: list[object] = []
        worker._send = lambda type_, body: sent.append(type_)  # type: ignore[method-assign]
        payload = b"x"
        task = dueq.protocol.Task("q", "a", "noop", payload, 0, 1, 3, 7, 0, dueq.protocol.checksum(payload), 0)
        worker._on_tasks(dueq.protocol.Tasks([task], 1))
        worker._on_tasks(dueq.protocol.Tasks([task], 2))
        self.assertEqual(len(worker._ready), 1)
        newer = dueq.protocol.Task("q", "a", "noop", payload, 0, 2, 3, 8, 0, dueq.protocol.checksum(payload), 0)
        worker._on_tasks(dueq.protocol.Tasks([newer], 3))
        self.assertEqual([t.token for t in worker._ready], [8])  # the older, not started, never runs
        self.assertEqual(worker._held[("q", "a")].token, 8)

    @staticmethod
    def quiet_worker(concurrency: int = 2) -> dueq.Worker:
        worker = dueq.Worker("tcp://127.0.0.1:1", ["q"], concurrency=concurrency)
        worker._send = lambda type_, body: None  # type: ignore[method-assign]
        return worker

    @staticmethod
    def task(id_: str, token: int, start_check: int) -> dueq.protocol.Task:
        payload = b"x"
        return dueq.protocol.Task("q", id_, "noop", payload, 0, 1, 3, token, 0, dueq.protocol.checksum(payload),
                                  start_check)

    def run_and_confirm(self, worker: dueq.Worker, task: dueq.protocol.Task) -> None:
        """What a handler thread and the broker's CONFIRM would do with a started task."""
        with worker._lock:
            worker._ready.remove(task)
        worker._finish(task, dueq.protocol.Result(task.ref, dueq.protocol.Outcome.DONE))
        worker._send_finished()
        worker._confirmed(task.ref)

    def test_a_dropped_start_of_a_replaced_delivery_holds_up_nothing(self) -> None:
        """Seen under nemesis seed 20261207: a Python worker held 8 jobs for minutes and ran none. A start
        announced for token 7 was dropped by the broker after token 8 of the same job came; the drop was
        ignored, so the announcement stayed pending forever, and a job that must start alone (start_check
        2) waited for it, with every other job held back behind that one."""
        worker = self.quiet_worker()
        worker._on_tasks(dueq.protocol.Tasks([self.task("a", 7, 1)], 1))
        worker._announce()
        self.assertIn(("q", "a"), worker._awaiting_go)
        alone, newer = self.task("b", 9, 2), self.task("a", 8, 0)
        worker._on_tasks(dueq.protocol.Tasks([alone, newer], 2))
        worker._on_start_reply([], [dueq.protocol.JobRef("q", "a", 7)])
        worker._announce()
        self.assertEqual(worker._awaiting_go.get(("q", "b")), alone)  # announced, by itself
        worker._on_start_reply([alone.ref], [])
        self.assertEqual(list(worker._ready), [alone])
        self.run_and_confirm(worker, alone)
        worker._announce()
        self.assertEqual(list(worker._ready), [newer])  # the rest start once it has run

    def test_a_go_for_a_replaced_delivery_keeps_the_newer_ones_announcement(self) -> None:
        worker = self.quiet_worker()
        worker._on_tasks(dueq.protocol.Tasks([self.task("a", 7, 1)], 1))
        worker._announce()
        newer = self.task("a", 8, 1)
        worker._on_tasks(dueq.protocol.Tasks([newer], 2))
        worker._announce()
        worker._on_start_reply([dueq.protocol.JobRef("q", "a", 7)], [])
        self.assertEqual(list(worker._ready), [])  # the older delivery does not run
        worker._on_start_reply([newer.ref], [])
        self.assertEqual(list(worker._ready), [newer])

    def test_a_replaced_delivery_that_ran_alone_releases_the_rest_when_it_ends(self) -> None:
        worker = self.quiet_worker()
        older = self.task("a", 7, 2)
        worker._on_tasks(dueq.protocol.Tasks([older], 1))
        worker._announce()
        worker._on_start_reply([older.ref], [])
        with worker._lock:
            worker._ready.remove(older)  # its handler runs it
            worker._running.add(("q", "a"))
        other, newer = self.task("b", 9, 0), self.task("a", 8, 0)
        worker._on_tasks(dueq.protocol.Tasks([other, newer], 2))
        worker._announce()
        self.assertEqual(list(worker._ready), [])  # nothing starts beside a start_check 2 job
        with worker._lock:
            worker._running.discard(("q", "a"))
        worker._finish(older, dueq.protocol.Result(older.ref, dueq.protocol.Outcome.DONE))
        worker._send_finished()  # stale: a newer delivery holds the job, so no CONFIRM will come
        worker._announce()
        self.assertEqual(list(worker._ready), [other, newer])


class PythonWorkerLog(unittest.TestCase):
    """Each job's start and end at INFO on "dueq.worker", unless log_jobs=False."""

    def run_one(self, worker: dueq.Worker, type_: str) -> None:
        payload = b"x"
        task = dueq.protocol.Task("q", "job-" + type_, type_, payload, 0, 1, 3, 7, 0, dueq.protocol.checksum(payload), 0)
        job = dueq.Job("q", task.id, type_, payload, 1, 3, 0, 0, 7)
        worker._execute_logged(task, job)

    def test_a_job_start_and_end_are_logged_and_log_jobs_false_quiets_them(self) -> None:
        worker = dueq.Worker("tcp://127.0.0.1:1", ["q"])

        @worker.handle("ok")
        def ok(job: dueq.Job) -> None:
            pass

        @worker.handle("bad")
        def bad(job: dueq.Job) -> None:
            raise RuntimeError("disk on fire")

        with self.assertLogs("dueq.worker", level="INFO") as logs:
            self.run_one(worker, "ok")
            self.run_one(worker, "bad")
        said = "\n".join(logs.output)
        self.assertIn("job 'job-ok' started: queue 'q', type 'ok', attempt 1 of 3", said)
        self.assertRegex(said, r"job 'job-ok' done in \d+ ms")
        self.assertRegex(said, r"job 'job-bad' failed in \d+ ms .*: RuntimeError: disk on fire")
        quiet = dueq.Worker("tcp://127.0.0.1:1", ["q"], log_jobs=False)
        quiet.handle("ok")(ok)
        with self.assertNoLogs("dueq.worker", level="INFO"):
            self.run_one(quiet, "ok")


class PythonProtocol(unittest.TestCase):
    def test_a_stats_reply_of_more_queues_than_two_batches_decodes(self) -> None:
        """A broker with 20,001 queues answers stats in one STATS_REPLY (its arrays pass 20,000)."""
        rows = [[f"q{i}"] + [0] * 16 for i in range(20_001)]
        frame = dueq.protocol.encode(dueq.protocol.Type.STATS_REPLY, [1, rows, 0])
        type_, body = dueq.protocol.decode(frame, reply=True)
        self.assertEqual(type_, dueq.protocol.Type.STATS_REPLY)
        self.assertEqual(len(body[1]), 20_001)
        with self.assertRaises(dueq.protocol.BadFrame):
            dueq.protocol.decode(frame)  # a worker's frame stays within two batches

    def test_a_stats_row_carries_its_top_keys_and_an_older_row_reads_none(self) -> None:
        """The documented STATS_REPLY names one key; a row of 25 fields (before top_keys) has none."""
        frame = (support.ROOT / "conformance" / "frames" / "13-STATS_REPLY.msgpack").read_bytes()
        _, body = dueq.protocol.decode(frame, reply=True)
        request_id, rows, _ = dueq.protocol.read_stats_reply(body)
        self.assertEqual(rows[0].top_keys, ((b"account-17", 3),))
        self.assertEqual(rows[0].waiting_for_key, 3)
        older = dueq.protocol.QueueStats.read(["q"] + [0] * 24)
        self.assertEqual(older.top_keys, ())
        with self.assertRaises(dueq.protocol.BadFrame):
            dueq.protocol.QueueStats.read(["q"] + [0] * 24 + [[[b"k", 1]] * 11])


class PythonProducer(unittest.TestCase):
    def test_a_request_timing_out_sends_the_next_to_the_next_broker(self) -> None:
        import zmq
        context = zmq.Context()
        silent, other = context.socket(zmq.ROUTER), context.socket(zmq.ROUTER)
        try:
            silent_port = silent.bind_to_random_port("tcp://127.0.0.1")
            other_port = other.bind_to_random_port("tcp://127.0.0.1")
            endpoints = [f"tcp://127.0.0.1:{silent_port}", f"tcp://127.0.0.1:{other_port}"]
            # Shorter than a resend: the only try times out.
            with dueq.Producer(endpoints, timeout=0.5, context=context) as producer:
                with self.assertRaises(TimeoutError):
                    producer.enqueue("q", "t", b"first")
                self.assertTrue(silent.poll(1000), "the first request went to the first endpoint")
                with self.assertRaises(TimeoutError):
                    producer.enqueue("q", "t", b"second")
                self.assertTrue(other.poll(1000), "the request after a timeout never reached the next broker")
        finally:
            silent.close(0)
            other.close(0)
            context.term()

    def test_a_job_document_is_the_one_the_cli_prints_whatever_bytes_it_holds(self) -> None:
        d = Deployment(self)
        payload = b"\xff\xfe not utf-8 \x80"
        with dueq.Producer(d.endpoint) as producer:
            producer.enqueue("q", "noop", payload, id="odd-1", delay=60)
            job = producer.job("odd-1", "q")
            assert job is not None
            self.assertEqual(job["payload"], {"encoding": "base64", "data": base64.b64encode(payload).decode()})
            self.assertEqual(job["state"], "scheduled")
            shown = subprocess.run([str(support.BIN / "dueq"), "--broker", d.endpoint, "job", "odd-1", "--queue", "q",
                                    "--json"], check=True, capture_output=True)
            self.assertEqual(job, json.loads(shown.stdout), "one document in every view")

    def test_enqueue_is_idempotent_by_id_and_lookups_answer(self) -> None:
        d = Deployment(self)
        with dueq.Producer(d.endpoint) as producer:
            first = producer.enqueue("q", "noop", b"payload", id="order-1", delay=60)
            self.assertEqual(first.status, dueq.EnqueueStatus.ACCEPTED)
            self.assertEqual(producer.enqueue("q", "noop", b"payload", id="order-1").status,
                             dueq.EnqueueStatus.DUPLICATE)
            job = producer.job("order-1")
            assert job is not None
            self.assertEqual((job["state"], job["type"], job["payload"], job["queue"]), ("scheduled", "noop", "payload", "q"))
            self.assertIsNone(producer.job("no-such-job"))
            with self.assertRaises(dueq.Rejected) as refused:
                producer.enqueue("bad queue name", "noop")
            self.assertIn("queue", str(refused.exception))
            many = producer.enqueue_many([dueq.NewJob("bulk", "noop", id=f"bulk-{i}") for i in range(12_000)])
            self.assertEqual(len(many), 12_000)
            self.assertTrue(all(r.status == dueq.EnqueueStatus.ACCEPTED for r in many))
            self.assertEqual([r.id for r in many[:3]], ["bulk-0", "bulk-1", "bulk-2"])
            again = producer.enqueue_many([dueq.NewJob("bulk", "noop", id=f"bulk-{i}") for i in range(12_000)])
            self.assertTrue(all(r.status == dueq.EnqueueStatus.DUPLICATE for r in again))
            stats = {s.queue: s for s in producer.stats()}
            self.assertEqual((stats["q"].scheduled, stats["q"].accepted), (1, 1))
            self.assertEqual((stats["bulk"].waiting, stats["bulk"].accepted), (12_000, 12_000))

    def test_a_flows_parent_runs_after_its_children_and_a_batchs_callbacks_after_its_members(self) -> None:
        d = Deployment(self)
        record = d.dir / "flows.rec"
        d.python_worker("--queue", "f", "--record", str(record))
        with dueq.Producer(d.endpoint) as producer:
            root = dueq.FlowJob(dueq.NewJob("f", "echo", b"parent", id="p"), [
                dueq.FlowJob(dueq.NewJob("f", "echo", b"one\xff", id="c1")),
                dueq.FlowJob(dueq.NewJob("f", "fail", b"x", id="c2", max_attempts=1), on_failure="proceed")])
            put = producer.enqueue_flow(root)
            self.assertEqual((put.status, put.ids), ("accepted", ["p", "c1", "c2"]))
            self.assertEqual(producer.enqueue_flow(root).status, "duplicate")
            self.assertEqual(producer.wait("p", "f", timeout=20).state, "done")
            children = producer.children("f", "p")
            self.assertEqual((children["kind"], children["state"], children["done"], children["dead"]),
                             ("flow", "settled", "1", "1"))
            by_id = {m["member"]: m for m in children["members"]}
            self.assertEqual(by_id["c1"]["result"].encode("utf-8", "surrogateescape"), b"one\xff")
            self.assertEqual(by_id["c2"]["member_state"], "dead")
            starts = [r[0] for r in read_records(record)]
            self.assertEqual(starts.count("p"), 1)
            self.assertGreater(starts.index("p"), starts.index("c1"))
            opened = producer.open_batch("f", "b-1", [dueq.NewJob("f", "echo", id="m1")],
                                         on_success=dueq.NewJob("f", "echo", id="ok"),
                                         on_complete=dueq.NewJob("f", "echo", id="over"))
            self.assertEqual(opened.status, "accepted")
            self.assertEqual(producer.add_to_batch("f", "b-1", [dueq.NewJob("f", "echo", id="m2")], close=True).status,
                             "accepted")
            self.assertEqual(producer.wait("ok", "f", timeout=20).state, "done")
            self.assertEqual(producer.wait("over", "f", timeout=20).state, "done")
            status = producer.batch_status("f", "b-1")
            self.assertEqual((status["total"], status["done"], status["state"]), ("2", "2", "settled"))
            self.assertEqual(producer.close_batch("f", "b-1").status, "batch_closed")
            deep = dueq.FlowJob(dueq.NewJob("f", "echo", id="d1"))
            at = deep
            for level in range(2, 6):
                at.children.append(dueq.FlowJob(dueq.NewJob("f", "echo", id=f"d{level}")))
                at = at.children[0]
            refused = producer.enqueue_flow(deep)
            self.assertEqual((refused.status, refused.job_index), ("rejected", 4))
            self.assertIn("at most 4 levels", refused.reason)
            self.assertIsNone(producer.job("d1", "f"))

    def test_a_unique_job_answers_another_with_its_unique_key_duplicate_with_its_id(self) -> None:
        d = Deployment(self)
        with dueq.Producer(d.endpoint) as producer:
            first = producer.enqueue("u", "noop", id="sync-1", delay=60, unique_key=b"account-\xff")
            self.assertEqual((first.status, first.existing_id), (dueq.EnqueueStatus.ACCEPTED, ""))
            second = producer.enqueue("u", "noop", id="sync-2", unique_key=b"account-\xff", unique_until="waiting")
            self.assertEqual((second.status, second.existing_id), (dueq.EnqueueStatus.DUPLICATE, "sync-1"))
            other = producer.enqueue("u", "noop", id="sync-3", unique_key="account-7", unique_for=3600)
            self.assertEqual(other.status, dueq.EnqueueStatus.ACCEPTED)
            with self.assertRaises(ValueError):
                producer.enqueue("u", "noop", unique_until="done")
            with self.assertRaises(ValueError):
                producer.enqueue("u", "noop", unique_key="k", unique_until="later")
            with self.assertRaises(dueq.Rejected):
                producer.enqueue("u", "noop", unique_key="k", unique_until="period")  # no period: the broker refuses
            burst = [producer.enqueue("u", "noop", payload, delay=60, unique_key="doc", unique_until="debounce",
                                      unique_for=600) for payload in (b"one", b"two")]
            self.assertEqual([r.existing_id for r in burst], ["", burst[0].id])
            job = producer.job(burst[0].id)
            assert job is not None
            self.assertEqual((job["payload"], job["unique_key"], job["unique_until"]), ("two", "doc", "debounce"))
            first_job = producer.job("sync-1")
            assert first_job is not None
            self.assertEqual(first_job["unique_key"], {"encoding": "base64", "data": "YWNjb3VudC3/"})
            stats = {s.queue: s for s in producer.stats()}
            self.assertEqual(stats["u"].accepted, 3)

    def test_a_waiting_job_is_rescheduled_edited_by_its_version_and_run_now(self) -> None:
        d = Deployment(self)
        record = d.dir / "control.rec"
        with dueq.Producer(d.endpoint) as producer:
            producer.enqueue("jc", "noop", b"old", id="p-1", delay=3600, key=b"k\xff")
            before = producer.job("p-1")
            assert before is not None and before["version"]
            asked = int(time.time() * 1000)
            producer.reschedule("p-1", asked + 7_200_000)
            moved = producer.job("p-1")
            assert moved is not None
            self.assertEqual((moved["state"], moved["run_at_ms"], moved["version"]), ("scheduled", asked + 7_200_000, before["version"]))
            version = producer.edit("p-1", b"new\xff", before["version"])
            self.assertNotEqual(version, before["version"])
            with self.assertRaises(dueq.DueqError) as stale:
                producer.edit("p-1", b"lost", before["version"])
            self.assertEqual(stale.exception.code, "conflict")
            with self.assertRaises(dueq.DueqError) as missing:
                producer.run_now("nobody")
            self.assertEqual(missing.exception.code, "not_found")
            edited = producer.job("p-1")
            assert edited is not None
            self.assertEqual((edited["payload"], edited["version"]), ({"encoding": "base64", "data": "bmV3/w=="}, version))
            self.assertEqual(edited["key"], {"encoding": "base64", "data": "a/8="}, "the key stays")
            d.python_worker("--queue", "jc", "--record", str(record))
            producer.run_now("p-1")
            self.assertTrue(eventually(lambda: len(read_records(record)) == 1, 10))
            self.assertEqual(read_records(record)[0][0], "p-1")
            self.assertTrue(eventually(lambda: (producer.job("p-1") or {}).get("state") == "done", 10))
            with self.assertRaises(dueq.DueqError) as finished:
                producer.reschedule("p-1", 0)
            self.assertEqual(finished.exception.code, "conflict")


class Readme(unittest.TestCase):
    def test_the_readmes_python_worker_and_producer_run_as_printed(self) -> None:
        readme = (support.ROOT / "README.md").read_text()
        worker_source, producer_source = re.findall(r"```python\n(.*?)```", readme, re.S)[:2]
        d = Deployment(self)
        sent = d.dir / "sent"
        script = d.dir / "readme_worker.py"
        script.write_text(f"def smtp_send(payload):\n    open({str(sent)!r}, 'ab').write(payload + b'\\n')\n"
                          "    return True\n\n" + worker_source.replace("tcp://broker.internal:7600", d.endpoint))
        env = dict(os.environ, PYTHONPATH=str(support.ROOT / "clients" / "python"))
        worker = d.spawn([sys.executable, str(script)], "readme-worker.log", env)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(producer_source.replace("tcp://broker.internal:7600", d.endpoint), {"bodies": [b"first", b"second"]})
        self.assertIn("'state': 'scheduled'", printed.getvalue())
        self.assertTrue(eventually(lambda: sent.exists() and sorted(sent.read_bytes().split()) == [b"first", b"second"],
                                   10), d.log("readme-worker.log"))
        worker.send_signal(signal.SIGTERM)
        self.assertEqual(worker.wait(10), 0)


if __name__ == "__main__":
    unittest.main()
