// Producer: enqueues jobs, reads queue statistics, looks jobs up, changes
// waiting jobs and waits for jobs to end. A request that gets no answer in
// time, an `unavailable` or `overloaded` answer, or a broker that stands by
// is sent again with the same job ids, so a job is written once however
// often it is resent (docs/protocol.md §3.2). Requests may overlap: each is
// told from the others by its request id.
import { randomBytes, randomUUID } from "node:crypto";
import type * as zmq from "zeromq";

import { CurveKeys, Endpoints, openDealer, Sender } from "./connection.js";
import * as p from "./protocol.js";
import { EnqueueResult, EnqueueStatus, Type } from "./protocol.js";

/** The broker answered ERROR; `code` is one of docs/protocol.md §5. */
export class DueqError extends Error {
  constructor(readonly code: string, message: string) {
    super(`${code}: ${message}`);
    this.name = "DueqError";
  }
}

/** The broker refused a job (a bad name, a payload too large, ...). */
export class Rejected extends DueqError {}

// The current OpenTelemetry context's traceparent and tracestate, when
// @opentelemetry/api is installed beside this package (it is not a
// dependency); none otherwise.
type Propagation = { inject: (context: unknown, carrier: Record<string, string>) => void };
let otel: { propagation: Propagation; context: { active: () => unknown } } | undefined;
try {
  otel = (await import("@opentelemetry/api" as string)) as typeof otel;
} catch {
  otel = undefined;
}

function currentTraceContext(): { traceparent: string; tracestate: string } {
  if (otel === undefined) return { traceparent: "", tracestate: "" };
  const carrier: Record<string, string> = {};
  otel.propagation.inject(otel.context.active(), carrier);
  return { traceparent: carrier["traceparent"] ?? "", tracestate: carrier["tracestate"] ?? "" };
}

/** A job to enqueue. Times are ms since the Unix epoch (UTC). */
export interface JobSpec {
  queue: string;
  type: string;
  payload?: string | Uint8Array;
  /** Default: a random UUID. */
  id?: string;
  /** Due time; 0 (the default) for now. */
  dueMs?: number;
  /** Due this many ms from now (instead of dueMs). */
  delayMs?: number;
  /** 0: the queue's default. */
  maxAttempts?: number;
  backoffBaseMs?: number;
  backoffCapMs?: number;
  /** Groups the job with others of its key for order and limits (docs/keys.md; at most 128 bytes). */
  key?: string | Uint8Array;
  /** Makes the job unique while it holds this key (docs/keys.md). */
  uniqueKey?: string | Uint8Array;
  uniqueUntil?: "waiting" | "started" | "done" | "period" | "debounce";
  uniqueForMs?: number;
  /** Never started after this; past it the job goes dead `expired`. */
  startByMs?: number;
  /** The caller's W3C trace context, handed to the job's handler (docs/jobs.md, "Tracing");
   * left out, the active OpenTelemetry span's when @opentelemetry/api is installed. */
  traceparent?: string;
  tracestate?: string;
}

/** A job of a flow (docs/flows.md) and the children it waits for. `onFailure`: what a
 * child's death or cancel does to its parent: "fail_parent" (the default: the parent goes
 * dead), "ignore" (it runs as if the child were done) or "proceed" (it runs and sees the
 * failure among its children); not used for the root. */
export interface FlowJob {
  job: JobSpec;
  children?: FlowJob[];
  onFailure?: "fail_parent" | "ignore" | "proceed";
}

/** How a flow or batch request went: `ids` are its jobs' ids in the order sent (a flow:
 * each parent before its children, depth first); `jobIndex` the job at fault, or -1. */
export interface GroupResult {
  status: p.GroupStatus;
  reason: string;
  ids: string[];
  jobIndex: number;
}

/** A flow's or batch's status row (kind, state, open, total, pending, done, dead,
 * cancelled, parent, success, complete, settled_ms), its members (member, member_state,
 * result, error) and where the next page starts ("" after the last). */
export interface GroupView {
  status: Record<string, string>;
  members: Record<string, string>[];
  next: string;
}

const ON_FAILURE = { fail_parent: 1, ignore: 2, proceed: 3 } as const;

const UNIQUE_UNTIL = { waiting: 1, started: 2, done: 3, period: 4, debounce: 5 } as const;

function jobWire(job: JobSpec & { id: string }): unknown[] {
  const due = job.delayMs !== undefined ? Date.now() + job.delayMs : job.dueMs ?? 0;
  const fields: unknown[] = [job.queue, job.id, job.type, p.toBytes(job.payload ?? new Uint8Array()), Math.floor(due),
    job.maxAttempts ?? 0, job.backoffBaseMs ?? 0, job.backoffCapMs ?? 0];
  const key = p.toBytes(job.key ?? new Uint8Array());
  const unique = p.toBytes(job.uniqueKey ?? new Uint8Array());
  if (unique.length > 0) {
    const until = job.uniqueUntil ?? (job.uniqueForMs ? "period" : "done");
    if (!(until in UNIQUE_UNTIL)) throw new Error(`uniqueUntil: waiting, started, done, period or debounce, not ${String(until)}`);
    fields.push(key, unique, UNIQUE_UNTIL[until], Math.floor(job.uniqueForMs ?? 0));
  } else if (job.uniqueUntil !== undefined || job.uniqueForMs) {
    throw new Error("uniqueUntil and uniqueForMs need a uniqueKey");
  } else if (job.startByMs || job.traceparent) {
    fields.push(key, new Uint8Array(), 0, 0); // the unique fields, as none, come before the deadline
  } else if (key.length > 0) {
    fields.push(key); // left out without one: a broker before 0.7 reads exactly 8 fields the same
  }
  if (job.tracestate && !job.traceparent) throw new Error("tracestate needs a traceparent");
  if (job.startByMs || job.traceparent) fields.push(Math.floor(job.startByMs ?? 0));
  if (job.traceparent) fields.push(job.traceparent, job.tracestate ?? "");
  return fields;
}

function members(queue: string, jobs: JobSpec[]): unknown[][] {
  return jobs.map((j) => [jobWire({ ...j, queue: j.queue || queue, id: j.id ?? randomUUID().replaceAll("-", "") }), 0, 0, 0]);
}

// One ENQUEUE stays within the broker's limits: 10,000 jobs and 8 MiB of payload.
const BATCH_PAYLOAD_BYTES = 8 << 20;
const RESEND_AFTER_MS = 1000;

interface Waiter {
  replyType: Type;
  resolve: (body: unknown[]) => void;
  fail: (error: p.ErrorReply) => void;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface ProducerOptions {
  keys?: CurveKeys;
  /** How long one call may take, in ms (default 30,000). */
  timeoutMs?: number;
}

export class Producer {
  private readonly endpoints: Endpoints;
  private readonly keys: CurveKeys | undefined;
  private readonly timeoutMs: number;
  private socket!: zmq.Dealer;
  private sender!: Sender;
  private readonly waiters = new Map<number, Waiter>();
  private nextRequestId = randomBytes(6).readUIntBE(0, 6) + 1;
  private closed = false;

  constructor(brokers: string | string[], options: ProducerOptions = {}) {
    this.endpoints = new Endpoints(brokers);
    this.keys = options.keys;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.open();
  }

  close(): void {
    this.closed = true;
    this.socket.close();
  }

  /** Enqueues one job; throws Rejected when the broker refuses it. The result is
   * `accepted`, or `duplicate` when a job with its id exists (or, with existingId,
   * one holds its unique key). */
  async enqueue(job: JobSpec): Promise<EnqueueResult> {
    const [result] = await this.enqueueMany([job]);
    if (result!.status === EnqueueStatus.REJECTED) throw new Rejected("rejected", result!.reason);
    return result!;
  }

  /** Enqueues jobs in as few frames as the limits allow; one result per job, in order. */
  async enqueueMany(jobs: JobSpec[]): Promise<EnqueueResult[]> {
    const results: EnqueueResult[] = [];
    let batch: (JobSpec & { id: string })[] = [];
    let bytes = 0;
    for (const job of jobs) {
      const size = p.toBytes(job.payload ?? "").length;
      if (batch.length > 0 && (batch.length === p.MAX_BATCH || bytes + size > BATCH_PAYLOAD_BYTES)) {
        results.push(...(await this.enqueueBatch(batch)));
        batch = [];
        bytes = 0;
      }
      const trace = job.traceparent === undefined ? currentTraceContext() : {};
      batch.push({ ...job, ...trace, id: job.id ?? randomUUID().replaceAll("-", "") });
      bytes += size;
    }
    if (batch.length > 0) results.push(...(await this.enqueueBatch(batch)));
    return results;
  }

  private async enqueueBatch(jobs: (JobSpec & { id: string })[]): Promise<EnqueueResult[]> {
    const wires = jobs.map((j) => ({ id: j.id, wire: jobWire(j) }));
    const done = new Map<string, EnqueueResult>();
    let waiting = wires;
    const deadline = Date.now() + this.timeoutMs;
    while (waiting.length > 0) {
      const body = await this.request(Type.ENQUEUE, (rid) => [rid, waiting.map((w) => w.wire)], Type.ENQUEUE_REPLY, deadline);
      const reply = p.readEnqueueReply(body);
      const overloaded = new Set<string>();
      for (const r of reply.results) {
        if (r.status === EnqueueStatus.OVERLOADED) overloaded.add(r.id);
        else done.set(r.id, r);
      }
      waiting = waiting.filter((w) => overloaded.has(w.id));
      if (waiting.length > 0) await this.pause(reply.retryAfterMs, deadline);
    }
    return jobs.map((j) => {
      const r = done.get(j.id);
      if (r === undefined) throw new DueqError("internal", `the broker's reply names no result for job ${j.id}`);
      return r;
    });
  }

  /** One row per queue the broker knows, and how many workers it has. */
  async stats(): Promise<{ queues: p.QueueStats[]; workers: number }> {
    const body = await this.request(Type.STATS_REQUEST, (rid) => [rid], Type.STATS_REPLY, Date.now() + this.timeoutMs);
    const reply = p.readStatsReply(body);
    return { queues: reply.queues, workers: reply.workers };
  }

  /** The job's fields as the broker sends them (docs/protocol.md, JOB_REPLY), or null. */
  async job(id: string, queue = ""): Promise<Record<string, string> | null> {
    const body = await this.request(Type.JOB_REQUEST, (rid) => [rid, id, queue], Type.JOB_REPLY, Date.now() + this.timeoutMs);
    const reply = p.readJobReply(body);
    return reply.found ? reply.fields : null;
  }

  /** Runs one ADMIN operation (the key must have the admin role). */
  async admin(op: string, queue = "", ids: string[] = [], options: { args?: Record<string, string | Uint8Array>; limit?: number; olderThanMs?: number } = {}): Promise<p.AdminResult> {
    const args = options.args ?? {};
    const body = await this.request(Type.ADMIN_REQUEST, (rid) => [rid, op, queue, ids, options.olderThanMs ?? 0, options.limit ?? 0, args],
      Type.ADMIN_REPLY, Date.now() + this.timeoutMs);
    const reply = p.readAdminReply(body);
    return { rows: reply.rows, summary: reply.summary, next: reply.next };
  }

  /** Enqueues a tree of jobs of the root's queue, whole or not at all: each parent runs
   * once all its children settled, at its own due time if later (at most 1,000 jobs, 4 levels). */
  async enqueueFlow(root: FlowJob): Promise<GroupResult> {
    const queue = root.job.queue;
    const jobs: unknown[][] = [];
    const add = (node: FlowJob, parent: number) => {
      if ((node.job.queue ?? "") !== "" && node.job.queue !== queue) throw new Error("every job of a flow is in its root's queue");
      const onFailure = node.onFailure ?? "fail_parent";
      if (!(onFailure in ON_FAILURE)) throw new Error(`onFailure: fail_parent, ignore or proceed, not ${String(onFailure)}`);
      jobs.push([jobWire({ ...node.job, queue, id: node.job.id ?? randomUUID().replaceAll("-", "") }), parent,
        parent === 0 ? 0 : ON_FAILURE[onFailure], 0]);
      const self = jobs.length;
      for (const child of node.children ?? []) add(child, self);
    };
    add(root, 0);
    return this.group(queue, "", 0, false, jobs);
  }

  /** Opens a batch with its callbacks and first members: `onSuccess` runs once every member
   * is done (cancelled if one is not), `onComplete` once every member settled, both after
   * the batch is closed. */
  async openBatch(queue: string, batchId: string, jobs: JobSpec[] = [],
    options: { onSuccess?: JobSpec; onComplete?: JobSpec; close?: boolean } = {}): Promise<GroupResult> {
    const wire: unknown[][] = [];
    for (const [role, spec] of [[1, options.onSuccess], [2, options.onComplete]] as const) {
      if (spec !== undefined) wire.push([jobWire({ ...spec, queue: spec.queue || queue, id: spec.id ?? randomUUID().replaceAll("-", "") }), 0, 0, role]);
    }
    wire.push(...members(queue, jobs));
    return this.group(queue, batchId, 1, options.close ?? false, wire);
  }

  /** Adds members to an open batch (at most 1,000 a call), and closes it with `close`. */
  async addToBatch(queue: string, batchId: string, jobs: JobSpec[], close = false): Promise<GroupResult> {
    return this.group(queue, batchId, 2, close, members(queue, jobs));
  }

  /** Closes a batch: its callbacks run once every member settled. */
  async closeBatch(queue: string, batchId: string): Promise<GroupResult> {
    return this.group(queue, batchId, 2, true, []);
  }

  /** A batch's status and a page of its members. */
  async batchStatus(queue: string, batchId: string, after = "", limit = 50): Promise<GroupView> {
    return this.groupView(queue, { batch: batchId }, after, limit);
  }

  /** A flow parent's status and its children's states and results, a page at a time. */
  async children(queue: string, parentId: string, after = "", limit = 50): Promise<GroupView> {
    return this.groupView(queue, { parent: parentId }, after, limit);
  }

  private async group(queue: string, batchId: string, action: number, close: boolean, jobs: unknown[][]): Promise<GroupResult> {
    if (jobs.length > p.MAX_GROUP_JOBS) throw new Error(`a flow or batch request holds at most ${p.MAX_GROUP_JOBS} jobs`);
    const ids = jobs.map((j) => (j[0] as unknown[])[1] as string);
    const deadline = Date.now() + this.timeoutMs;
    for (;;) {
      const body = await this.request(Type.GROUP_ENQUEUE, (rid) => [rid, queue, batchId, action, close, jobs], Type.GROUP_ENQUEUE_REPLY, deadline);
      const reply = p.readGroupEnqueueReply(body);
      if (reply.status !== "overloaded" || Date.now() >= deadline) return { status: reply.status, reason: reply.reason, ids, jobIndex: reply.jobIndex };
      await this.pause(reply.retryAfterMs, deadline);
    }
  }

  private async groupView(queue: string, named: Record<string, string>, after: string, limit: number): Promise<GroupView> {
    const args: Record<string, string> = { ...named, limit: String(limit) };
    if (after !== "") args["after"] = after;
    const result = await this.admin("group", queue, [], { args });
    return { status: result.rows[0] ?? {}, members: result.rows.slice(1), next: result.next };
  }

  /** Cancels jobs: waiting ones at once, running ones are told to stop. */
  async cancel(ids: string[], queue = ""): Promise<p.AdminResult> {
    return this.admin("cancel", queue, ids);
  }

  /** Moves a waiting job's due time (at or before now: ready at once). A job that runs
   * or finished throws DueqError "conflict". */
  async reschedule(id: string, dueMs: number, queue = ""): Promise<void> {
    await this.admin("job_reschedule", queue, [id], { args: { at_ms: String(Math.max(0, Math.floor(dueMs))) } });
  }

  async runNow(id: string, queue = ""): Promise<void> {
    await this.admin("job_reschedule", queue, [id], { args: { now: "1" } });
  }

  /** Replaces a waiting job's payload if its version (the fields' `v`) is still
   * `version`; returns the new version. DueqError "conflict" when it changed. */
  async edit(id: string, payload: string | Uint8Array, version: string, queue = ""): Promise<string> {
    const result = await this.admin("job_edit", queue, [id], { args: { payload: p.toBytes(payload), version } });
    const v = result.rows[0]?.["version"];
    if (v === undefined) throw new DueqError("internal", "job_edit: the broker's reply names no version");
    return v;
  }

  /** Waits up to `timeoutMs` for the job to end: done (with its result), dead (with
   * its error) or cancelled; pending when it has not ended by then, unknown when the
   * queue holds no such job. Goes on at the broker that leads across a take-over. */
  async wait(id: string, queue: string, timeoutMs = 30_000): Promise<p.JobEnd> {
    const deadline = Date.now() + Math.max(0, timeoutMs);
    // Each WAIT is answered within 3/4 of a request's timeout, so that a
    // silent broker is told from a long wait.
    const longest = Math.max(0, Math.min(p.MAX_WAIT_MS, Math.floor(this.timeoutMs * 0.75) - 100));
    for (;;) {
      const waitMs = Math.min(Math.max(0, deadline - Date.now()), longest);
      let body: unknown[];
      try {
        body = await this.request(Type.WAIT, (rid) => [rid, queue, id, waitMs], Type.WAIT_REPLY, Date.now() + this.timeoutMs);
      } catch (error) {
        if (error instanceof DueqError || Date.now() >= deadline) throw error;
        continue;
      }
      const { end } = p.readWaitReply(body);
      if (end.state !== "pending" || Date.now() >= deadline) return end;
    }
  }

  // -- one request, answered or resent until the deadline

  private open(): void {
    this.socket = openDealer(this.endpoints.current, undefined, this.keys);
    this.sender = new Sender(this.socket);
    void this.receive(this.socket);
  }

  /** To the leader a standby named (added to the list when missing), else to the next endpoint. */
  private move(notLeaderMessage: string): void {
    const named = notLeaderMessage.replaceAll(",", " ").replaceAll(";", " ").split(/\s+/).find((w) => w.includes("://")) ?? "";
    this.endpoints.learn(named);
    if (!this.endpoints.moveTo(named)) this.endpoints.advance();
    this.socket.close();
    this.open();
  }

  private async receive(socket: zmq.Dealer): Promise<void> {
    try {
      for await (const [data] of socket) {
        if (data === undefined) continue;
        let type: Type, body: unknown[];
        try {
          [type, body] = p.decode(data, true);
        } catch {
          continue; // malformed: dropped whole
        }
        if (type === Type.ERROR) {
          let error: p.ErrorReply;
          try {
            error = p.readError(body);
          } catch {
            continue;
          }
          // Errors no request can be named in come with request id 0: every waiter hears them.
          const named = error.requestId === 0 ? [...this.waiters.values()] : [this.waiters.get(error.requestId)];
          for (const waiter of named) waiter?.fail(error);
          continue;
        }
        const rid = body[0];
        const waiter = typeof rid === "number" || typeof rid === "bigint" ? this.waiters.get(Number(rid)) : undefined;
        if (waiter !== undefined && waiter.replyType === type) waiter.resolve(body);
      }
    } catch {
      // the socket was closed (a move, or close())
    }
  }

  private async request(type: Type, body: (rid: number) => unknown[], replyType: Type, deadline: number): Promise<unknown[]> {
    if (this.closed) throw new Error("the producer is closed");
    const rid = this.nextRequestId++;
    const frame = p.encode(type, body(rid));
    try {
      for (;;) {
        const answer = await new Promise<{ body?: unknown[]; error?: p.ErrorReply }>((resolve) => {
          const timer = setTimeout(() => resolve({}), Math.max(1, Math.min(deadline, Date.now() + RESEND_AFTER_MS) - Date.now()));
          this.waiters.set(rid, {
            replyType,
            resolve: (b) => { clearTimeout(timer); resolve({ body: b }); },
            fail: (e) => { clearTimeout(timer); resolve({ error: e }); },
          });
          this.sender.send(frame);
        });
        if (answer.body !== undefined) return answer.body;
        if (answer.error !== undefined) {
          const e = answer.error;
          if (e.code === "not_leader") this.move(e.message);
          else if (e.code === "unavailable" || e.code === "overloaded") await this.pause(e.retryAfterMs, deadline);
          else throw new DueqError(e.code, e.message);
        } else if (this.endpoints.all.length > 1) {
          const silent = this.endpoints.current;
          this.move("");
          if (Date.now() >= deadline) throw new Error(`no answer from ${silent} in ${this.timeoutMs} ms`);
        }
        if (Date.now() >= deadline) throw new Error(`no answer from ${this.endpoints.current} in ${this.timeoutMs} ms`);
      }
    } finally {
      this.waiters.delete(rid);
    }
  }

  private async pause(retryAfterMs: number, deadline: number): Promise<void> {
    await sleep(Math.max(0, Math.min(Math.max(retryAfterMs, 10), deadline - Date.now())));
  }
}
