"""Broker rules that only a hand-driven peer can show, spoken with the
Python package's frame codec (dueq.protocol) over a raw DEALER socket."""

from __future__ import annotations

import time
import unittest
from typing import Any

import zmq

from support import Deployment

import dueq
from dueq import protocol
from dueq.protocol import Type


class RawWorker:
    def __init__(self, endpoint: str, queue: str, capacity: int) -> None:
        self.socket = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.linger = 0
        self.socket.routing_id = b"raw-worker"
        self.socket.connect(endpoint)
        self.socket.send(protocol.encode(Type.HELLO, ["raw-worker", [queue], capacity, [], "host", 1]))
        self.held: list[protocol.Task] = []
        self.seqs: list[int] = []
        self.errors: list[protocol.ErrorReply] = []

    def pump(self, seconds: float, heartbeat_every: float = 0.1) -> None:
        """Reads for `seconds`, heartbeating the jobs it holds; never says RECEIVED."""
        end = time.monotonic() + seconds
        next_beat = 0.0
        while (now := time.monotonic()) < end:
            if now >= next_beat:
                self.socket.send(protocol.encode(Type.HEARTBEAT, [[t.ref.wire() for t in self.held], 100, False]))
                next_beat = now + heartbeat_every
            if self.socket.poll(20):
                type_, body = protocol.decode(self.socket.recv())
                if type_ == Type.TASKS:
                    tasks = protocol.Tasks.read(body)
                    self.held += tasks.items
                    self.seqs.append(tasks.seq)
                elif type_ == Type.ERROR:
                    self.errors.append(protocol.ErrorReply.read(body))

    def send(self, type_: Type, body: list[Any]) -> None:
        self.socket.send(protocol.encode(type_, body))


class BrokerRules(unittest.TestCase):
    def test_a_worker_that_skips_received_gets_16_jobs_and_is_told_why(self) -> None:
        d = Deployment(self, ["--heartbeat", "100ms", "--delivery-timeout", "1s"])
        worker = RawWorker(d.endpoint, "q", 100)
        self.addCleanup(worker.socket.close, 0)
        worker.pump(0.3)
        with dueq.Producer(d.endpoint) as producer:
            producer.enqueue_many([dueq.NewJob("q", "noop") for _ in range(40)])
            worker.pump(1.8)  # heartbeats list its jobs, past the delivery timeout
            self.assertEqual(len(worker.held), 16, "held in heartbeats but never RECEIVED: the unconfirmed credit")
            self.assertEqual(len(worker.errors), 1, [e.message for e in worker.errors])
            self.assertEqual(worker.errors[0].code, "bad_frame")
            self.assertIn(f"TASKS seq {worker.seqs[0]} was never confirmed with RECEIVED", worker.errors[0].message)
            self.assertIn("without having sent RECEIVED", d.log("broker.log"))
            for seq in worker.seqs:
                worker.send(Type.RECEIVED, [seq])
            worker.pump(1.0)
            self.assertEqual(len(worker.held), 40, "after RECEIVED, its whole capacity")
            self.assertEqual(len(worker.errors), 1, "told once per frame")
            stats = producer.stats()[0]
            self.assertEqual((stats.in_flight, stats.waiting), (40, 0))


if __name__ == "__main__":
    unittest.main()
