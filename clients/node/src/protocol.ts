// The dueq wire protocol, version 1 (docs/protocol.md): a frame is a msgpack
// array [version, type, body] whose body is an array of the frame's fields
// in the documented order. This module encodes what a client sends and
// checks every frame it receives before anything reads it.
import { Decoder, Encoder } from "@msgpack/msgpack";
import { createXXHash3 } from "hash-wasm";

export const VERSION = 1;
export const MAX_FRAME_BYTES = 16 << 20;
export const MAX_PAYLOAD_BYTES = 1 << 20;
export const MAX_BATCH = 10_000;
// The most values a reply to a client may hold (protocol.md §1): a
// STATS_REPLY lists every queue, up to 100,000.
export const MAX_REPLY_VALUES = 4_000_000;
export const MAX_ERROR_TEXT = 4096;
export const MAX_SNOOZE_MS = 10 * 366 * 86_400_000;
export const MAX_RESULT_BYTES = 64 << 10;
export const MAX_PROGRESS_TEXT = 256;
export const MAX_WAIT_MS = 60_000;
export const MAX_CAPACITY = 10_000;
export const MAX_WEIGHT = 1000;
/** Jobs of one GROUP_ENQUEUE: a flow, or a batch's members at once (docs/flows.md). */
export const MAX_GROUP_JOBS = 1000;
const U32 = 0xffff_ffff;
const U64 = (1n << 64n) - 1n;

export enum Type {
  HELLO = 1,
  WELCOME = 2,
  HEARTBEAT = 4,
  PONG = 5,
  RESULTS = 6,
  CONFIRM = 7,
  BYE = 8,
  CANCEL = 9,
  ENQUEUE = 10,
  ENQUEUE_REPLY = 11,
  STATS_REQUEST = 12,
  STATS_REPLY = 13,
  JOB_REQUEST = 14,
  JOB_REPLY = 15,
  ADMIN_REQUEST = 16,
  ADMIN_REPLY = 17,
  TASKS = 18,
  RECEIVED = 19,
  ERROR = 20,
  STARTING = 21,
  START_REPLY = 22,
  HAND_BACK = 23,
  WAIT = 24,
  WAIT_REPLY = 25,
  PROGRESS = 26,
  GROUP_ENQUEUE = 27,
  GROUP_ENQUEUE_REPLY = 28,
}

export enum Outcome {
  DONE = 0,
  FAILED = 1,
  FAILED_FINAL = 2,
  CANCELLED = 3,
  SNOOZED = 4,
  EXPIRED = 5,
}

export enum EnqueueStatus {
  ACCEPTED = 0,
  DUPLICATE = 1,
  REJECTED = 2,
  OVERLOADED = 3,
}

/** A frame that fails docs/protocol.md §2: nothing in it may be used. */
export class BadFrame extends Error {}

// XXH3-64 with seed 0, ready once the module is loaded (WebAssembly).
const xxh3 = await createXXHash3(0, 0);

/** XXH3-64 (seed 0) of a payload: the TASKS `payload_checksum`. */
export function checksum(payload: Uint8Array): bigint {
  xxh3.init();
  xxh3.update(payload);
  return BigInt("0x" + xxh3.digest("hex"));
}

const encoder = new Encoder({ useBigInt64: true, ignoreUndefined: false });

// With useBigInt64 the encoder writes a number past 32 bits as a float64:
// integers (ids, times) go out as bigint, which it writes as an integer.
function integersExact(value: unknown): unknown {
  if (typeof value === "number") return Number.isInteger(value) && Math.abs(value) > 0x7fff_ffff ? BigInt(value) : value;
  if (Array.isArray(value)) return value.map(integersExact);
  return value;
}

export function encode(type: Type, body: unknown[]): Uint8Array {
  return encoder.encode([VERSION, type, integersExact(body)]);
}

// A worker's frames stay within two batches; a reply to a client may be as
// long as MAX_REPLY_VALUES.
const workerDecoder = new Decoder({
  useBigInt64: true,
  maxArrayLength: MAX_BATCH * 2,
  maxMapLength: MAX_BATCH,
  maxBinLength: MAX_FRAME_BYTES,
  maxStrLength: MAX_FRAME_BYTES,
});
const replyDecoder = new Decoder({
  useBigInt64: true,
  maxArrayLength: MAX_REPLY_VALUES,
  maxMapLength: MAX_BATCH,
  maxBinLength: MAX_FRAME_BYTES,
  maxStrLength: MAX_FRAME_BYTES,
});

/** The type and body of a frame, or BadFrame naming what is wrong. */
export function decode(data: Uint8Array, reply = false): [Type, unknown[]] {
  if (data.length > MAX_FRAME_BYTES) throw new BadFrame("frame larger than 16 MiB");
  let frame: unknown;
  try {
    frame = (reply ? replyDecoder : workerDecoder).decode(data);
  } catch (error) {
    throw new BadFrame(`not msgpack: ${(error as Error).message}`);
  }
  if (!Array.isArray(frame) || frame.length !== 3) throw new BadFrame("a frame is an array of [version, type, body]");
  const [version, type, body] = frame as [unknown, unknown, unknown];
  if (Number(version) !== VERSION || typeof version === "boolean") throw new BadFrame("unsupported protocol version");
  if (typeof type !== "number" || Type[type] === undefined) throw new BadFrame(`unknown frame type ${String(type)}`);
  if (!Array.isArray(body)) throw new BadFrame("the body is not an array");
  return [type as Type, body];
}

// -- field readers: each checks the wire type and range docs/protocol.md gives

export function fields(value: unknown, need: number, what: string): unknown[] {
  if (!Array.isArray(value)) throw new BadFrame(`${what}: not an array`);
  if (value.length < need) throw new BadFrame(`${what}: ${value.length} fields where ${need} are needed`);
  return value;
}

function isInteger(value: unknown): value is number | bigint {
  return typeof value === "bigint" || (typeof value === "number" && Number.isInteger(value));
}

/** An integer that fits a JS number (all but tokens and checksums). */
export function int(value: unknown, what: string, low = Number.MIN_SAFE_INTEGER, high = Number.MAX_SAFE_INTEGER): number {
  if (!isInteger(value) || BigInt(value) < BigInt(low) || BigInt(value) > BigInt(high))
    throw new BadFrame(`${what}: not an integer in ${low}..${high}`);
  return Number(value);
}

export function uint(value: unknown, what: string, high = Number.MAX_SAFE_INTEGER, low = 0): number {
  return int(value, what, low, high);
}

/** A 64-bit unsigned integer (a token, a checksum). */
export function u64(value: unknown, what: string, low = 0n): bigint {
  if (!isInteger(value) || BigInt(value) < low || BigInt(value) > U64) throw new BadFrame(`${what}: not a uint64`);
  return BigInt(value);
}

export function str(value: unknown, what: string): string {
  if (typeof value !== "string") throw new BadFrame(`${what}: not a str`);
  return value;
}

function bool(value: unknown, what: string): boolean {
  if (typeof value !== "boolean") throw new BadFrame(`${what}: not a bool`);
  return value;
}

const utf8 = new TextEncoder();

/** bin, or str (receivers MUST accept str for a payload), as bytes. */
export function bytes(value: unknown, what: string): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (typeof value === "string") return utf8.encode(value);
  throw new BadFrame(`${what}: not bin`);
}

export function list(value: unknown, what: string, high = MAX_BATCH, low = 0): unknown[] {
  if (!Array.isArray(value) || value.length < low || value.length > high)
    throw new BadFrame(`${what}: not an array of ${low}..${high} items`);
  return value;
}

export function toBytes(value: string | Uint8Array): Uint8Array {
  return typeof value === "string" ? utf8.encode(value) : value;
}

/** One delivery: a job and the token of the lease it was sent under. */
export interface JobRef {
  queue: string;
  id: string;
  token: bigint;
}

export function refWire(ref: JobRef): unknown[] {
  return [ref.queue, ref.id, ref.token];
}

export function readRef(value: unknown): JobRef {
  const f = fields(value, 3, "job reference");
  return { queue: str(f[0], "queue"), id: str(f[1], "id"), token: u64(f[2], "token", 1n) };
}

export function readRefs(value: unknown, what: string): JobRef[] {
  return list(value, what).map(readRef);
}

/** One job of a TASKS frame. */
export interface Task {
  queue: string;
  id: string;
  type: string;
  payload: Uint8Array;
  dueMs: number;
  attempt: number;
  maxAttempts: number;
  token: bigint;
  createdMs: number;
  payloadChecksum: bigint;
  startCheck: number;
  key: Uint8Array; // empty: none (or a broker before 0.7)
  startByMs: number; // 0: none (or a broker before 0.8)
  traceparent: string; // "": none (or a broker before 0.9)
  tracestate: string;
}

export function readTask(value: unknown): Task {
  const f = fields(value, 11, "task");
  return {
    queue: str(f[0], "queue"),
    id: str(f[1], "id"),
    type: str(f[2], "type"),
    payload: bytes(f[3], "payload"),
    dueMs: int(f[4], "due_ms"),
    attempt: uint(f[5], "attempt", U32),
    maxAttempts: uint(f[6], "max_attempts", U32),
    token: u64(f[7], "token", 1n),
    createdMs: int(f[8], "created_ms"),
    payloadChecksum: u64(f[9], "payload_checksum"),
    startCheck: uint(f[10], "start_check", 2),
    key: f.length > 11 ? bytes(f[11], "key") : new Uint8Array(),
    startByMs: f.length > 12 ? int(f[12], "start_by_ms") : 0,
    traceparent: f.length > 13 ? str(f[13], "traceparent") : "",
    tracestate: f.length > 14 ? str(f[14], "tracestate") : "",
  };
}

export interface Welcome {
  brokerId: string;
  heartbeatMs: number;
  workerTimeoutMs: number; // 0: a broker before 0.3 did not say
  deliveryTimeoutMs: number;
}

export function readWelcome(body: unknown[]): Welcome {
  const f = fields(body, 2, "WELCOME");
  const timeouts = f.slice(2, 4).map((v) => uint(v, "timeout", U32));
  return {
    brokerId: str(f[0], "broker_id"),
    heartbeatMs: uint(f[1], "heartbeat_ms", U32, 1),
    workerTimeoutMs: timeouts[0] ?? 0,
    deliveryTimeoutMs: timeouts[1] ?? 0,
  };
}

export function readTasks(body: unknown[]): { items: Task[]; seq: number } {
  const f = fields(body, 2, "TASKS");
  return { items: list(f[0], "items", MAX_BATCH, 1).map(readTask), seq: uint(f[1], "seq", Number.MAX_SAFE_INTEGER, 1) };
}

export interface ErrorReply {
  requestId: number;
  code: string;
  message: string;
  retryAfterMs: number;
}

export function readError(body: unknown[]): ErrorReply {
  const f = fields(body, 4, "ERROR");
  return {
    requestId: uint(f[0], "request_id"),
    code: str(f[1], "code"),
    message: str(f[2], "message"),
    retryAfterMs: uint(f[3], "retry_after_ms", U32),
  };
}

export function readStartReply(body: unknown[]): { go: JobRef[]; drop: JobRef[] } {
  const f = fields(body, 2, "START_REPLY");
  return { go: readRefs(f[0], "go"), drop: readRefs(f[1], "drop") };
}

export interface EnqueueResult {
  id: string;
  status: EnqueueStatus;
  reason: string;
  existingId: string; // a duplicate by a unique key: the job that holds it
}

export function readEnqueueReply(body: unknown[]): { requestId: number; results: EnqueueResult[]; retryAfterMs: number } {
  const f = fields(body, 3, "ENQUEUE_REPLY");
  const results = list(f[1], "results").map((item) => {
    const r = fields(item, 3, "enqueue result");
    return {
      id: str(r[0], "id"),
      status: uint(r[1], "status", 3) as EnqueueStatus,
      reason: str(r[2], "reason"),
      existingId: r.length > 3 ? str(r[3], "existing_id") : "",
    };
  });
  return { requestId: uint(f[0], "request_id"), results, retryAfterMs: uint(f[2], "retry_after_ms", U32) };
}

/** GROUP_ENQUEUE_REPLY statuses (docs/flows.md), by their wire numbers. */
export const GROUP_STATUSES = ["accepted", "duplicate", "rejected", "overloaded", "no_batch", "batch_closed", "batch_exists",
  "batch_full"] as const;
export type GroupStatus = (typeof GROUP_STATUSES)[number];

export function readGroupEnqueueReply(body: unknown[]): { requestId: number; status: GroupStatus; reason: string; jobIndex: number; retryAfterMs: number } {
  const f = fields(body, 5, "GROUP_ENQUEUE_REPLY");
  return {
    requestId: uint(f[0], "request_id"),
    status: GROUP_STATUSES[uint(f[1], "status", GROUP_STATUSES.length - 1)]!,
    reason: str(f[2], "reason"),
    jobIndex: int(f[3], "job_index", -1),
    retryAfterMs: uint(f[4], "retry_after_ms", U32),
  };
}

const STATS_FIELDS = [
  "queue", "scheduled", "waiting", "inFlight", "done", "dead", "accepted", "retried", "staleAcks", "nextDueMs",
  "cancelled", "purged", "died", "unconfirmed", "replayed", "staleExtends", "oldestReadyDueMs", "pausedSinceMs",
  "rateLimit", "rateBurst", "concurrencyLimit", "historyKept", "historyTrimmed", "keysRunning", "waitingForKey",
  "topKeys", "snoozed", "expired",
] as const;

/** A STATS_REPLY row; fields an older broker leaves out read as 0. */
export interface QueueStats {
  queue: string;
  scheduled: number;
  waiting: number;
  inFlight: number;
  done: number;
  dead: number;
  accepted: number;
  retried: number;
  staleAcks: number;
  nextDueMs: number;
  cancelled: number;
  purged: number;
  died: number;
  unconfirmed: number;
  replayed: number;
  staleExtends: number;
  oldestReadyDueMs: number;
  pausedSinceMs: number;
  rateLimit: number;
  rateBurst: number;
  concurrencyLimit: number;
  historyKept: number;
  historyTrimmed: number;
  keysRunning: number;
  waitingForKey: number;
  /** The (at most 10) keys with the most jobs waiting for a turn: [key, waiting]. */
  topKeys: [Uint8Array, number][];
  snoozed: number;
  expired: number;
}

function readStatsRow(value: unknown): QueueStats {
  const row = fields(value, 12, "stats row");
  const out: Record<string, unknown> = { queue: str(row[0], "queue"), topKeys: [] };
  for (let i = 1; i < STATS_FIELDS.length; ++i) {
    const name = STATS_FIELDS[i]!;
    const v = row[i];
    if (v === undefined) {
      if (name !== "topKeys") out[name] = 0;
    } else if (name === "topKeys") {
      out[name] = list(v, "top_keys", 10).map((p) => {
        const pair = fields(p, 2, "top key");
        return [bytes(pair[0], "key"), int(pair[1], "waiting")];
      });
    } else if (name === "rateLimit") {
      if (typeof v !== "number" && typeof v !== "bigint") throw new BadFrame("rate_limit: not a number");
      out[name] = Number(v);
    } else {
      out[name] = int(v, name);
    }
  }
  return out as unknown as QueueStats;
}

export function readStatsReply(body: unknown[]): { requestId: number; queues: QueueStats[]; workers: number } {
  const f = fields(body, 3, "STATS_REPLY");
  return {
    requestId: uint(f[0], "request_id"),
    queues: list(f[1], "queues", 1 << 20).map(readStatsRow),
    workers: uint(f[2], "workers", U32),
  };
}

function stringMap(value: unknown, what: string): Record<string, string> {
  if (value === null || typeof value !== "object" || Array.isArray(value) || value instanceof Uint8Array)
    throw new BadFrame(`${what}: not a map of str to str`);
  for (const v of Object.values(value)) if (typeof v !== "string") throw new BadFrame(`${what}: not a map of str to str`);
  return value as Record<string, string>;
}

export function readJobReply(body: unknown[]): { requestId: number; found: boolean; fields: Record<string, string> } {
  const f = fields(body, 3, "JOB_REPLY");
  return { requestId: uint(f[0], "request_id"), found: bool(f[1], "found"), fields: stringMap(f[2], "JOB_REPLY fields") };
}

/** How a job ended (WAIT_REPLY). */
export interface JobEnd {
  /** done, dead, cancelled; pending (not by the wait's end) or unknown (no such job). */
  state: "done" | "dead" | "cancelled" | "pending" | "unknown";
  finishedMs: number;
  result: Uint8Array;
  error: string;
}

export function readWaitReply(body: unknown[]): { requestId: number; end: JobEnd } {
  const f = fields(body, 5, "WAIT_REPLY");
  const state = str(f[1], "state");
  if (!["done", "dead", "cancelled", "pending", "unknown"].includes(state)) throw new BadFrame(`unknown wait state ${state}`);
  return {
    requestId: uint(f[0], "request_id"),
    end: { state: state as JobEnd["state"], finishedMs: int(f[2], "finished_ms"), result: bytes(f[3], "result"), error: str(f[4], "error") },
  };
}

export interface AdminResult {
  rows: Record<string, string>[];
  summary: string;
  /** Where a paged listing goes on ("" when it is complete). */
  next: string;
}

export function readAdminReply(body: unknown[]): { requestId: number } & AdminResult {
  const f = fields(body, 3, "ADMIN_REPLY");
  const rows = list(f[1], "ADMIN_REPLY rows", MAX_REPLY_VALUES).map((r) => stringMap(r, "ADMIN_REPLY row"));
  return {
    requestId: uint(f[0], "request_id"),
    rows,
    summary: str(f[2], "summary"),
    next: f.length > 3 ? str(f[3], "next") : "",
  };
}

/** A RESULTS item: what became of one delivery. */
export interface Result {
  ref: JobRef;
  outcome: Outcome;
  error: string;
  snoozeMs: number;
  result: Uint8Array;
}

/** `text` cut to at most `limit` bytes, not inside a UTF-8 character. */
export function cutUtf8(text: Uint8Array, limit: number, fromEnd = false): Uint8Array {
  if (text.length <= limit) return text;
  if (fromEnd) {
    let start = text.length - limit;
    while (start < text.length && (text[start]! & 0xc0) === 0x80) ++start;
    return text.subarray(start);
  }
  let cut = limit;
  while (cut > 0 && (text[cut]! & 0xc0) === 0x80) --cut;
  return text.subarray(0, cut);
}

const utf8Decoder = new TextDecoder();

export function resultWire(r: Result): unknown[] {
  // The error's last MAX_ERROR_TEXT bytes: where a stack trace says what failed.
  const text = utf8Decoder.decode(cutUtf8(utf8.encode(r.error), MAX_ERROR_TEXT, true));
  const item: unknown[] = [r.ref.queue, r.ref.id, r.ref.token, r.outcome, text];
  if (r.outcome === Outcome.SNOOZED) item.push(Math.min(Math.max(0, Math.floor(r.snoozeMs)), MAX_SNOOZE_MS));
  else if (r.outcome === Outcome.DONE && r.result.length > 0) item.push(0, r.result);
  return item;
}
