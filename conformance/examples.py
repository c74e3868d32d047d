#!/usr/bin/env python3
"""One example of every frame type of docs/protocol.md: written as
conformance/frames/NN-NAME.msgpack (the bytes) and as the annotated listing
in the document's appendix (each byte sequence beside what it encodes).

    examples.py            rewrite both
    examples.py --check    exit 1 when either differs from what this writes

The listing comes from a small encoder that labels each msgpack item as it
writes it; its bytes are checked against msgpack.packb, so the annotations
describe real msgpack."""

from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import]
import xxhash

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "protocol.md"
BEGIN, END = "<!-- frame examples: conformance/examples.py writes this part -->", "<!-- end of frame examples -->"

PAYLOAD = b'{"to":"ann@example.com"}'
CHECKSUM = int(xxhash.xxh3_64_intdigest(PAYLOAD))
TOKEN = 0x8F3A5C7E12B4D690
REF = ("job", [("queue", "mail"), ("id", "welcome-42"), ("token", TOKEN)])


def L(*fields: Any) -> tuple[str, list[Any]]:
    return ("", list(fields))


# (type, name, direction, body fields as (name, value)); a value that is a
# list of (name, value) pairs is a nested array.
EXAMPLES: list[tuple[int, str, list[tuple[str, Any]]]] = [
    (1, "HELLO", [("worker_id", "web-1-8812"), ("queues", ["mail", "sms"]), ("capacity", 8), ("held", []),
                  ("host", "web-1"), ("pid", 8812), ("weights", [3, 1]), ("strict", False)]),
    (2, "WELCOME", [("broker_id", "5d0f3a9c1e7b2a64"), ("heartbeat_ms", 500), ("worker_timeout_ms", 1500),
                    ("delivery_timeout_ms", 2000)]),
    (4, "HEARTBEAT", [("held", [[("queue", "mail"), ("id", "welcome-42"), ("token", TOKEN)]]), ("capacity", 8),
                      ("draining", False)]),
    (5, "PONG", [("broker_id", "5d0f3a9c1e7b2a64")]),
    (6, "RESULTS", [("items", [[("queue", "mail"), ("id", "welcome-42"), ("token", TOKEN), ("outcome", 0),
                                ("error", "")]])]),
    (7, "CONFIRM", [("items", [[("queue", "mail"), ("id", "welcome-42"), ("token", TOKEN)]])]),
    (8, "BYE", [("unstarted", [])]),
    (9, "CANCEL", [("job", [("queue", "mail"), ("id", "welcome-42"), ("token", TOKEN)])]),
    (10, "ENQUEUE", [("request_id", 7), ("jobs", [[("queue", "mail"), ("id", "welcome-42"), ("type", "send_email"),
                                                    ("payload", PAYLOAD), ("due_ms", 1798761600000),
                                                    ("max_attempts", 0), ("backoff_base_ms", 0),
                                                    ("backoff_cap_ms", 0), ("key", b"account-17")]])]),
    (11, "ENQUEUE_REPLY", [("request_id", 7), ("results", [[("id", "welcome-42"), ("status", 0), ("reason", "")]]),
                           ("retry_after_ms", 0)]),
    (12, "STATS_REQUEST", [("request_id", 8)]),
    (13, "STATS_REPLY", [("request_id", 8), ("queues", [[
        ("queue", "mail"), ("scheduled", 1), ("waiting", 0), ("in_flight", 0), ("done", 41), ("dead", 0),
        ("accepted", 42), ("retried", 2), ("stale_acks", 0), ("next_due_ms", 1798761600000), ("cancelled", 0),
        ("purged", 0), ("died", 0), ("unconfirmed", 1), ("replayed", 0), ("stale_extends", 0),
        ("oldest_ready_due_ms", 0), ("paused_since_ms", 0), ("rate_limit", 0), ("rate_burst", 0),
        ("concurrency_limit", 0), ("history_kept", 0), ("history_trimmed", 0), ("keys_running", 1),
        ("waiting_for_key", 3), ("top_keys", [[("key", b"account-17"), ("waiting", 3)]]), ("snoozed", 0),
        ("expired", 0)]]), ("workers", 2)]),
    (14, "JOB_REQUEST", [("request_id", 9), ("id", "welcome-42"), ("queue", "")]),
    (15, "JOB_REPLY", [("request_id", 9), ("found", True),
                       ("fields", {"d": "1798761600000", "id": "welcome-42", "queue": "mail", "s": "scheduled"})]),
    (16, "ADMIN_REQUEST", [("request_id", 10), ("op", "pause"), ("queue", "mail"), ("ids", []), ("older_than_ms", 0),
                           ("limit", 0), ("args", {})]),
    (17, "ADMIN_REPLY", [("request_id", 10), ("rows", []), ("summary", "queue 'mail' paused"), ("next", "")]),
    (18, "TASKS", [("items", [[("queue", "mail"), ("id", "welcome-42"), ("type", "send_email"), ("payload", PAYLOAD),
                               ("due_ms", 1798761600000), ("attempt", 1), ("max_attempts", 5), ("token", TOKEN),
                               ("created_ms", 1798758000000), ("payload_checksum", CHECKSUM),
                               ("start_check", 0), ("key", b"account-17")]]), ("seq", 3)]),
    (19, "RECEIVED", [("seq", 3)]),
    (20, "ERROR", [("request_id", 0), ("code", "unknown_worker"), ("message", "say hello first"),
                   ("retry_after_ms", 0)]),
    (21, "STARTING", [("items", [[("queue", "mail"), ("id", "welcome-42"), ("token", TOKEN)]])]),
    (22, "START_REPLY", [("go", [[("queue", "mail"), ("id", "welcome-42"), ("token", TOKEN)]]), ("drop", [])]),
    (23, "HAND_BACK", [("unstarted", [[("queue", "mail"), ("id", "welcome-42"), ("token", TOKEN)]])]),
    (24, "WAIT", [("request_id", 11), ("queue", "mail"), ("id", "welcome-42"), ("timeout_ms", 30000)]),
    (25, "WAIT_REPLY", [("request_id", 11), ("state", "done"), ("finished_ms", 1798761600250), ("result", b"sent"),
                        ("error", "")]),
    (26, "PROGRESS", [("items", [[("queue", "mail"), ("id", "welcome-42"), ("token", TOKEN), ("percent", 40),
                                  ("text", b"4 of 10")]])]),
    (27, "GROUP_ENQUEUE", [("request_id", 12), ("queue", "mail"), ("batch_id", ""), ("batch", 0), ("close", False),
                           ("jobs", [[("job", [("queue", "mail"), ("id", "digest"), ("type", "send"), ("payload", b"{}"),
                                               ("due_ms", 0), ("max_attempts", 0), ("backoff_base_ms", 0),
                                               ("backoff_cap_ms", 0)]),
                                      ("parent", 0), ("on_failure", 0), ("role", 0)],
                                     [("job", [("queue", "mail"), ("id", "part-1"), ("type", "render"), ("payload", b""),
                                               ("due_ms", 0), ("max_attempts", 0), ("backoff_base_ms", 0),
                                               ("backoff_cap_ms", 0)]),
                                      ("parent", 1), ("on_failure", 1), ("role", 0)]])]),
    (28, "GROUP_ENQUEUE_REPLY", [("request_id", 12), ("status", 0), ("reason", ""), ("job_index", -1),
                                 ("retry_after_ms", 0)]),
]


def plain(value: Any) -> Any:
    """The msgpack value of an example field (named pairs become arrays)."""
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return [plain(v) for _, v in value]
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


class Listing:
    def __init__(self) -> None:
        self.lines: list[tuple[int, bytes, str]] = []

    def add(self, depth: int, data: bytes, label: str) -> None:
        self.lines.append((depth, data, label))

    def value(self, depth: int, name: str, value: Any) -> None:
        label = f"{name}: " if name else ""
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            self.add(depth, array_header(len(value)), f"{label}array of {len(value)}")
            for field_name, v in value:
                self.value(depth + 1, field_name, v)
        elif isinstance(value, list):
            self.add(depth, array_header(len(value)), f"{label}array of {len(value)}")
            for i, v in enumerate(value):
                self.value(depth + 1, f"[{i}]", v)
        elif isinstance(value, dict):
            self.add(depth, map_header(len(value)), f"{label}map of {len(value)}")
            for k, v in value.items():
                self.value(depth + 1, "key", k)
                self.value(depth + 1, "value", v)
        else:
            data = msgpack.packb(value, use_bin_type=True)
            self.add(depth, data, label + describe(value, data))

    def render(self) -> str:
        out = []
        for depth, data, label in self.lines:
            hex_text = data.hex(" ")
            if len(data) > 12:
                hex_text = data[:12].hex(" ") + f" … ({len(data)} bytes)"
            head = f"{'  ' * depth}{hex_text}"
            out.append(head.ljust(max(52, len(head) + 2)) + label)
        return "\n".join(out)

    def bytes(self) -> bytes:
        return b"".join(d for _, d, _ in self.lines)


def array_header(n: int) -> bytes:
    return bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n)


def map_header(n: int) -> bytes:
    return bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)


def describe(value: Any, data: bytes) -> str:
    if isinstance(value, bool):
        return f"bool {str(value).lower()}"
    if isinstance(value, int) and value < 0:
        width = {1: "negative fixint", 2: "int8", 3: "int16", 5: "int32", 9: "int64"}[len(data)]
        return f"{width} {value}"
    if isinstance(value, int):
        width = {1: "positive fixint", 2: "uint8", 3: "uint16", 5: "uint32", 9: "uint64"}[len(data)]
        return f"{width} {value}"
    if isinstance(value, float):
        return f"float64 {value}"
    if isinstance(value, str):
        return f'str "{value}"'
    if isinstance(value, bytes):
        return f"bin ({len(value)} bytes) {value.decode(errors='replace')}"
    raise TypeError(value)


def example(type_: int, name: str, body: list[tuple[str, Any]]) -> tuple[bytes, str]:
    listing = Listing()
    listing.add(0, b"\x93", "frame: array of 3")
    listing.add(1, b"\x01", "version: 1")
    listing.add(1, msgpack.packb(type_), f"type: {type_} ({name})")
    listing.value(1, "body", body)
    data = listing.bytes()
    assert data == msgpack.packb([1, type_, plain(body)], use_bin_type=True), name
    return data, listing.render()


def render_all() -> tuple[dict[str, bytes], str]:
    files, sections = {}, []
    for type_, name, body in EXAMPLES:
        data, text = example(type_, name, body)
        files[f"{type_:02d}-{name}.msgpack"] = data
        sections.append(f"#### {type_} {name} ({len(data)} bytes)\n\n    {data.hex()}\n\n```text\n{text}\n```\n")
    intro = (f"The token in these examples is {TOKEN} (0x{TOKEN:X}); the payload's XXH3-64 (seed 0) is "
             f"{CHECKSUM}. Each example is first the whole frame in hex, then each msgpack item with what it "
             "encodes (long items cut after 12 bytes). The same bytes are in `conformance/frames/`, and the "
             "C++ decoder reads every one of them (`Protocol.EveryDocumentedExampleDecodes`).\n")
    return files, f"{BEGIN}\n{intro}\n" + "\n".join(sections) + END


def main() -> int:
    check = "--check" in sys.argv
    files, section = render_all()
    doc = DOC.read_text()
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    new_doc = doc[:start] + section + doc[end:]
    frames_dir = HERE / "frames"
    stale = [n for n, d in files.items() if not (frames_dir / n).exists() or (frames_dir / n).read_bytes() != d]
    stale += [p.name for p in frames_dir.glob("*.msgpack") if p.name not in files]
    if check:
        if new_doc != doc or stale:
            print(f"out of date: {'docs/protocol.md ' if new_doc != doc else ''}{' '.join(stale)}; "
                  "run conformance/examples.py")
            return 1
        print(f"{len(files)} frame examples match docs/protocol.md and conformance/frames/")
        return 0
    DOC.write_text(new_doc)
    for p in frames_dir.glob("*.msgpack"):
        p.unlink()
    for n, d in files.items():
        (frames_dir / n).write_bytes(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
