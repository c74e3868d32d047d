"""The public job document (docs/jobs.md): the shape every view of a job takes,
built here from the short field names of a JOB_REPLY (docs/protocol.md) as
common/job_document.cpp builds it for the CLI and the dashboard."""

from __future__ import annotations

import base64
import datetime
from typing import Any, Optional


def _bytes(value: str) -> bytes:
    # Replies are decoded with surrogateescape: bytes that are not UTF-8 come back as they were.
    return value.encode("utf-8", "surrogateescape")


def bytes_json(value: str) -> Any:
    """A string when its bytes are UTF-8, else {"encoding": "base64", "data": ...}."""
    raw = _bytes(value)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"encoding": "base64", "data": base64.b64encode(raw).decode("ascii")}


def _number(fields: dict[str, str], key: str) -> Optional[int]:
    text = fields.get(key)
    if text is None:
        return None
    try:
        return int(text, 10) if text.lstrip("-").isdigit() else None
    except ValueError:
        return None


def iso_time(ms: Optional[int]) -> Optional[str]:
    if ms is None or ms <= 0:
        return None
    at = datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def _unescape(field: str) -> str:
    out, i = [], 0
    while i < len(field):
        c = field[i]
        if c == "\\" and i + 1 < len(field):
            i += 1
            c = {"n": "\n", "t": "\t"}.get(field[i], field[i])
        out.append(c)
        i += 1
    return "".join(out)


def _legacy_entry(line: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"number": None, "counted": True, "at_ms": None, "worker": "", "reason": line}
    for prefix, counted in (("attempt ", True), ("unstarted delivery ", False)):
        if not line.startswith(prefix) or ": " not in line[len(prefix):]:
            continue
        head, reason = line[len(prefix):].split(": ", 1)
        head = head.split(" ", 1)[0]
        if head.isdigit():
            entry.update(number=int(head), counted=counted, reason=reason)
    return entry


def parse_error_log(log: str) -> list[dict[str, Any]]:
    """A job's error log, one entry per line (lua/lib/lost_delivery.lua)."""
    out = []
    for line in log.split("\n"):
        if not line:
            continue
        parts = line.split("\t", 3)
        kind, _, number = parts[0].partition(" ")
        if len(parts) != 4 or kind not in ("attempt", "unstarted") or not number:
            out.append(_legacy_entry(line))
            continue
        out.append({"number": int(number) if number.isdigit() else None, "counted": kind == "attempt",
                    "at_ms": int(parts[1]) if parts[1].isdigit() else None,
                    "worker": _unescape(parts[2]), "reason": _unescape(parts[3])})
    return out


def job_document(fields: dict[str, str]) -> dict[str, Any]:
    """The job document of a JOB_REPLY's fields."""
    kept = "t" in fields
    payload: Any = None
    payload_bytes: Optional[int] = None
    if "p" in fields:
        payload, payload_bytes = bytes_json(fields["p"]), len(_bytes(fields["p"]))
    elif "p_bytes" in fields:
        payload_bytes = _number(fields, "p_bytes")
    elif kept:
        payload, payload_bytes = "", 0
    finished = _number(fields, "f")
    if finished is None:
        finished = _number(fields, "died_ms")
    errors = []
    for e in parse_error_log(fields.get("el", "")):
        errors.append({"attempt": e["number"] if e["counted"] else None,
                       "unstarted_delivery": None if e["counted"] else e["number"],
                       "at": iso_time(e["at_ms"]), "at_ms": e["at_ms"],
                       "worker": bytes_json(e["worker"]) if e["worker"] else None,
                       "reason": bytes_json(e["reason"])})
    doc: dict[str, Any] = {
        "id": bytes_json(fields.get("id", "")), "queue": bytes_json(fields.get("queue", "")),
        "state": "running" if fields.get("s") == "leased" else fields.get("s", ""),
        "type": bytes_json(fields.get("t", "")) if kept else None,
        "key": bytes_json(fields["k"]) if fields.get("k") else None,
        "unique_key": bytes_json(fields["uk"]) if fields.get("uk") else None,
        "unique_until": fields.get("uu") or None,
        "parent": bytes_json(fields["gp"]) if fields.get("gp") else None,
        "batch": bytes_json(fields["gb"]) if fields.get("gb") else None,
        "has_children": fields.get("gc") == "1",
        "payload": payload, "payload_bytes": payload_bytes,
        "result": bytes_json(fields["rs"]) if "rs" in fields else None,
        "progress": None,
    }
    percent = _number(fields, "pg")
    if percent is not None:
        at_ms = _number(fields, "pa")
        doc["progress"] = {"percent": percent, "text": bytes_json(fields.get("pt", "")), "at": iso_time(at_ms),
                           "at_ms": at_ms}
    for name, key in (("due", "d"), ("run_at", "r"), ("start_by", "sb"), ("created", "c"), ("lease_deadline", "l"),
                      ("started", "st")):
        ms = _number(fields, key)
        doc[name], doc[name + "_ms"] = iso_time(ms), ms
    doc["traceparent"], doc["tracestate"] = fields.get("tp") or None, fields.get("ts") or None
    doc["worker"] = bytes_json(fields["w"]) if fields.get("w") else None
    doc["finished"], doc["finished_ms"] = iso_time(finished), finished
    doc.update({"attempt": _number(fields, "a"), "max_attempts": _number(fields, "m"),
                "backoff_base_ms": _number(fields, "bb"), "backoff_cap_ms": _number(fields, "bc"),
                "last_error": bytes_json(fields["e"]) if fields.get("e") else None,
                "errors": errors, "cancel_requested": fields.get("cx") == "1",
                "waiting_for_key": fields.get("pk") == "1", "record_kept": kept,
                "also_in": [bytes_json(q) for q in fields["also_in"].split(",")] if fields.get("also_in") else [],
                "version": fields.get("v") or None})
    return doc
