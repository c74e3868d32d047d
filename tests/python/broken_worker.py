"""The Python worker with one MUST of docs/protocol.md skipped, for the
conformance suite to catch: --skip received (never sends RECEIVED),
checksum (runs a payload whatever its checksum says), resend (forgets
unconfirmed results when a new WELCOME comes), go (starts a task at once
whatever its start_check asks) or coalescing (sends each PROGRESS three
times, as a worker sending one per report would)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import dueq.worker
from dueq import protocol

skip = sys.argv[sys.argv.index("--skip") + 1]
del sys.argv[sys.argv.index("--skip"):sys.argv.index("--skip") + 2]

if skip == "received":
    original_send = dueq.worker.Worker._send

    def send_without_received(self: dueq.worker.Worker, type_: protocol.Type, body: list[object]) -> None:
        if type_ != protocol.Type.RECEIVED:
            original_send(self, type_, body)
    dueq.worker.Worker._send = send_without_received  # type: ignore[method-assign]
elif skip == "checksum":
    original_read = protocol.Tasks.read

    def read_trusting(body: list[Any]) -> protocol.Tasks:
        tasks = original_read(body)
        return protocol.Tasks([dataclasses.replace(t, payload_checksum=protocol.checksum(t.payload))
                               for t in tasks.items], tasks.seq)
    protocol.Tasks.read = staticmethod(read_trusting)  # type: ignore[method-assign]
elif skip == "resend":
    original_welcome = dueq.worker.Worker._on_welcome

    def welcome_forgetting(self: dueq.worker.Worker, welcome: protocol.Welcome) -> None:
        self._unconfirmed.clear()
        original_welcome(self, welcome)
    dueq.worker.Worker._on_welcome = welcome_forgetting  # type: ignore[method-assign]
elif skip == "go":
    original_tasks_read = protocol.Tasks.read

    def read_ignoring_start_check(body: list[Any]) -> protocol.Tasks:
        tasks = original_tasks_read(body)
        return protocol.Tasks([dataclasses.replace(t, start_check=0) for t in tasks.items], tasks.seq)
    protocol.Tasks.read = staticmethod(read_ignoring_start_check)  # type: ignore[method-assign]
elif skip == "coalescing":
    original_progress_send = dueq.worker.Worker._send

    def send_progress_thrice(self: dueq.worker.Worker, type_: protocol.Type, body: list[object]) -> None:
        for _ in range(3 if type_ == protocol.Type.PROGRESS else 1):
            original_progress_send(self, type_, body)
    dueq.worker.Worker._send = send_progress_thrice  # type: ignore[method-assign]
else:
    sys.exit(f"unknown --skip {skip}")

import record_worker  # noqa: E402  (after the patch it applies to)

record_worker.main()
