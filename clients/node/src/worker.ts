// Worker: runs jobs by type, as docs/protocol.md §3.3 asks of a worker. It
// says HELLO, confirms every TASKS frame with RECEIVED before it starts a
// job, checks each payload's checksum, announces jobs whose `start_check`
// asks for it (STARTING) and starts them only once the broker says `go`,
// heartbeats the jobs it holds, sends results and keeps them until CONFIRM
// (sent again after every new WELCOME), moves between broker endpoints when
// one goes quiet, and drains on SIGTERM. Handlers are async functions run on
// Node's event loop, at most `concurrency` at once.
import { hostname } from "node:os";
import { randomUUID } from "node:crypto";
import type * as zmq from "zeromq";

import { CurveKeys, Endpoints, openDealer, Sender } from "./connection.js";
import * as p from "./protocol.js";
import { JobRef, Outcome, Result, Task, Type } from "./protocol.js";

/** Thrown by a handler: the job fails for good (dead letters), no retry. */
export class Fail extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Fail";
  }
}

/** Thrown by a handler: run the job again after `delayMs` (or at `untilMs`, Unix ms),
 * with no attempt used and nothing added to its error log. A job snoozed more than
 * its queue's max_snoozes (100 by default) goes dead instead. */
export class Snooze extends Error {
  readonly delayMs: number;
  constructor(options: { delayMs?: number; untilMs?: number; reason?: string } = {}) {
    super(options.reason || "snoozed");
    this.name = "Snooze";
    const delay = options.untilMs !== undefined ? options.untilMs - Date.now() : options.delayMs ?? 0;
    this.delayMs = Math.max(0, Math.floor(delay));
  }
}

const utf8 = new TextEncoder();

/**
 * The latest progress report of each running delivery (by token), sent with
 * each heartbeat: many reports between two heartbeats cost one item.
 */
class ProgressBoard {
  private readonly latest = new Map<bigint, { ref: JobRef; percent: number; text: Uint8Array }>();
  private changed = new Set<bigint>();

  report(ref: JobRef, percent: number, text: Uint8Array): void {
    this.latest.set(ref.token, { ref, percent, text });
    this.changed.add(ref.token);
  }

  close(token: bigint): void {
    this.latest.delete(token);
    this.changed.delete(token);
  }

  takeChanged(): unknown[][] {
    const items: unknown[][] = [];
    for (const token of this.changed) {
      const r = this.latest.get(token)!;
      items.push([r.ref.queue, r.ref.id, token, r.percent, r.text]);
    }
    this.changed.clear();
    return items;
  }

  markAllChanged(): void {
    this.changed = new Set(this.latest.keys());
  }
}

/** What a handler gets. */
export class Job {
  readonly queue: string;
  readonly id: string;
  readonly type: string;
  readonly payload: Uint8Array;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly dueMs: number;
  readonly createdMs: number;
  readonly token: bigint;
  /** The key it was enqueued with (empty: none). */
  readonly key: Uint8Array;
  /** The W3C trace context it was enqueued with ("": none): start the handler's span as its child. */
  readonly traceparent: string;
  readonly tracestate: string;
  private readonly abort = new AbortController();
  private running = false;

  constructor(task: Task, private readonly board: ProgressBoard) {
    this.queue = task.queue;
    this.id = task.id;
    this.type = task.type;
    this.payload = task.payload;
    this.attempt = task.attempt;
    this.maxAttempts = task.maxAttempts;
    this.dueMs = task.dueMs;
    this.createdMs = task.createdMs;
    this.token = task.token;
    this.key = task.key;
    this.traceparent = task.traceparent;
    this.tracestate = task.tracestate;
  }

  /** The payload as UTF-8 text. */
  get text(): string {
    return new TextDecoder().decode(this.payload);
  }

  /** True once the job was cancelled while it ran: the handler should stop. */
  get cancelled(): boolean {
    return this.abort.signal.aborted;
  }

  /** Aborted when the job is cancelled while it runs (pass it to fetch and timers). */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** Tells how far the handler got: `percent` (clamped to 0..100) and a short text
   * (cut to 256 bytes). Cheap to call often: the latest report goes to the broker
   * with the next heartbeat. */
  progress(percent: number, text: string | Uint8Array = ""): void {
    if (!this.running) return;
    const clamped = Math.max(0, Math.min(100, Math.floor(percent)));
    this.board.report({ queue: this.queue, id: this.id, token: this.token }, clamped, p.cutUtf8(p.toBytes(text), p.MAX_PROGRESS_TEXT));
  }

  /** @internal */
  setRunning(running: boolean): void {
    this.running = running;
    if (!running) this.board.close(this.token);
  }

  /** @internal */
  cancel(): void {
    this.abort.abort(new Error("cancelled"));
  }
}

/** A handler may return its result (bytes or a string, at most 64 KiB). */
export type Handler = (job: Job) => Promise<string | Uint8Array | void> | string | Uint8Array | void;

export interface WorkerOptions {
  /** Jobs run at once (default 4). */
  concurrency?: number;
  /** Jobs held beyond those running (default: concurrency). */
  prefetch?: number;
  /** With a map of queue weights: jobs come from the first queue, in order, that has any. */
  strict?: boolean;
  workerId?: string;
  keys?: CurveKeys;
  /** How long a drain waits for running jobs, in ms (default 30,000). */
  drainTimeoutMs?: number;
  /** Where the worker says what it does (default: console); null for silence. */
  log?: ((level: "info" | "warn", message: string) => void) | null;
}

const HELLO_ANSWER_MS = 1000; // no WELCOME this long after HELLO: HELLO again, at the next endpoint if any
const RESULT_BATCH = 1000;
const TICK_MS = 20;

type Key = string; // queue + "\0" + id
const keyOf = (ref: { queue: string; id: string }): Key => `${ref.queue}\0${ref.id}`;
const refOf = (t: Task): JobRef => ({ queue: t.queue, id: t.id, token: t.token });

export class Worker {
  readonly workerId: string;
  private readonly queues: string[];
  private readonly weights: number[];
  private readonly concurrency: number;
  private readonly capacity: number;
  private readonly strict: boolean;
  private readonly endpoints: Endpoints;
  private readonly keys: CurveKeys | undefined;
  private readonly drainTimeoutMs: number;
  private readonly log: (level: "info" | "warn", message: string) => void;
  private readonly handlers = new Map<string, Handler>();
  private socket: zmq.Dealer | undefined;
  private sender: Sender | undefined;

  private readonly held = new Map<Key, Task>(); // received, no result yet
  private toAnnounce: Task[] = [];
  private heldBack: Task[] = []; // unannounced, waiting for a start_check 2 task
  private readonly awaitingGo = new Map<Key, Task>(); // STARTING sent, no START_REPLY yet
  // Announced deliveries (by job and token), with their start_check, until their
  // result is confirmed, the broker drops them, or they turn stale.
  private readonly announced = new Map<string, number>();
  private readonly unconfirmed = new Map<Key, Result>(); // result sent, no CONFIRM yet
  private readonly jobs = new Map<Key, Job>();
  private ready: Task[] = []; // may start now
  private readonly running = new Set<Key>();
  private finished: [Task, Result][] = [];
  private readonly progress = new ProgressBoard();

  private heartbeatMs = 1000;
  private welcomed = false;
  private unansweredHellos = 0;
  private helloSentAt = 0;
  private lastHeard = 0;
  private nextHeartbeat = 0;
  private draining = false;
  private drainDeadline = 0;
  private confirmDeadline: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private done: (() => void) | undefined;

  /** `queues`: names, or a map of name to weight (1..1000). */
  constructor(brokers: string | string[], queues: string[] | Record<string, number>, options: WorkerOptions = {}) {
    this.queues = Array.isArray(queues) ? [...queues] : Object.keys(queues);
    this.weights = Array.isArray(queues) ? [] : this.queues.map((q) => queues[q]!);
    if (this.queues.length === 0) throw new Error("no queue given");
    if (this.weights.some((w) => !Number.isInteger(w) || w < 1 || w > p.MAX_WEIGHT)) throw new Error("a weight is 1..1000");
    this.concurrency = options.concurrency ?? 4;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) throw new Error("concurrency is at least 1");
    this.capacity = Math.min(p.MAX_CAPACITY, this.concurrency + (options.prefetch ?? this.concurrency));
    this.strict = options.strict ?? false;
    this.workerId = options.workerId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
    this.endpoints = new Endpoints(brokers);
    this.keys = options.keys;
    this.drainTimeoutMs = options.drainTimeoutMs ?? 30_000;
    const sink = options.log === undefined ? (level: string, m: string) => (level === "warn" ? console.warn(m) : console.log(m)) : options.log;
    this.log = sink ?? (() => {});
  }

  /** Runs `handler` for jobs of `type`. */
  handle(type: string, handler: Handler): this {
    this.handlers.set(type, handler);
    return this;
  }

  /** Works until stop(), SIGTERM or SIGINT, then drains: hands back jobs not started,
   * finishes the running ones, and resolves. */
  run(): Promise<void> {
    const onSignal = () => this.stop();
    process.once("SIGTERM", onSignal);
    process.once("SIGINT", onSignal);
    return new Promise<void>((resolve) => {
      this.done = () => {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
        resolve();
      };
      this.connect();
      this.timer = setInterval(() => this.tick(), TICK_MS);
    });
  }

  /** Starts the drain (run() resolves once it is done). */
  stop(): void {
    if (!this.draining && this.socket !== undefined) this.startDrain(Date.now());
  }

  // -- the connection

  private send(type: Type, body: unknown[]): void {
    this.sender?.send(p.encode(type, body));
  }

  private connect(): void {
    this.socket?.close();
    const socket = openDealer(this.endpoints.current, this.workerId, this.keys);
    this.socket = socket;
    this.sender = new Sender(socket);
    this.welcomed = false;
    void this.receive(socket);
    this.sayHello();
  }

  private sayHello(): void {
    const held = [...this.held.values()].map((t) => p.refWire(refOf(t)));
    this.send(Type.HELLO, [this.workerId, this.queues, this.capacity, held, hostname(), process.pid, this.weights, this.strict]);
    this.helloSentAt = Date.now();
  }

  private move(): void {
    this.endpoints.advance();
    this.log("info", `moving to broker ${this.endpoints.current}`);
    this.connect();
  }

  private async receive(socket: zmq.Dealer): Promise<void> {
    try {
      for await (const [data] of socket) {
        if (socket !== this.socket) return;
        if (data !== undefined) this.onFrame(data);
        this.sendFinished();
        this.announce();
      }
    } catch {
      // closed: a move, or the end of the drain
    }
  }

  private tick(): void {
    const now = Date.now();
    if (this.draining && this.drained(now)) return this.finish();
    if (!this.welcomed && now - this.helloSentAt >= HELLO_ANSWER_MS) {
      if (this.unansweredHellos % 60 === 0)
        this.log("warn", `no WELCOME from ${this.endpoints.current} within ${HELLO_ANSWER_MS} ms (a broker down, or a key it refuses)`);
      ++this.unansweredHellos;
      if (this.endpoints.all.length > 1) this.move();
      else this.sayHello();
    } else if (this.welcomed && now - this.lastHeard > 3 * this.heartbeatMs) {
      this.log("warn", `nothing from ${this.endpoints.current} for three heartbeats`);
      if (this.endpoints.all.length > 1) {
        this.move();
      } else {
        // ZeroMQ reconnects by itself; a new socket would bring the same
        // routing id while the broker may still hold the old connection.
        this.welcomed = false; // results wait for the WELCOME
        this.sayHello();
      }
    }
    if (this.welcomed && now >= this.nextHeartbeat) this.heartbeat(now);
  }

  private heartbeat(now: number): void {
    this.send(Type.HEARTBEAT, [[...this.held.values()].map((t) => p.refWire(refOf(t))), this.capacity, this.draining]);
    const items = this.progress.takeChanged();
    for (let i = 0; i < items.length; i += p.MAX_BATCH) this.send(Type.PROGRESS, [items.slice(i, i + p.MAX_BATCH)]);
    this.nextHeartbeat = now + this.heartbeatMs;
  }

  private onFrame(data: Uint8Array): void {
    try {
      const [type, body] = p.decode(data);
      switch (type) {
        case Type.TASKS: this.onTasks(p.readTasks(body)); break;
        case Type.WELCOME: this.onWelcome(p.readWelcome(body)); break;
        case Type.CONFIRM: for (const ref of p.readRefs(p.fields(body, 1, "CONFIRM")[0], "CONFIRM items")) this.confirmed(ref); break;
        case Type.START_REPLY: { const r = p.readStartReply(body); this.onStartReply(r.go, r.drop); break; }
        case Type.CANCEL: this.onCancel(p.readRef(p.fields(body, 1, "CANCEL")[0])); break;
        case Type.ERROR: this.onError(p.readError(body)); break;
        case Type.PONG: p.str(p.fields(body, 1, "PONG")[0], "broker_id"); break;
        default: throw new p.BadFrame(`a worker gets no frame of type ${Type[type]}`);
      }
    } catch (error) {
      if (!(error instanceof p.BadFrame)) throw error;
      this.log("warn", `dropped a malformed frame from the broker: ${error.message}`); // §3.1: whole, changing nothing
      return;
    }
    this.lastHeard = Date.now();
  }

  private onWelcome(welcome: p.Welcome): void {
    this.progress.markAllChanged();
    this.welcomed = true;
    this.unansweredHellos = 0;
    this.heartbeatMs = welcome.heartbeatMs;
    this.log("info", `welcomed by broker ${welcome.brokerId} at ${this.endpoints.current}`);
    const unconfirmed = [...this.unconfirmed.values()];
    for (let i = 0; i < unconfirmed.length; i += RESULT_BATCH)
      this.send(Type.RESULTS, [unconfirmed.slice(i, i + RESULT_BATCH).map(p.resultWire)]);
    if (this.awaitingGo.size > 0) this.send(Type.STARTING, [[...this.awaitingGo.values()].map((t) => p.refWire(refOf(t)))]);
    this.heartbeat(Date.now()); // until its first heartbeat a worker is a newcomer (protocol §3.3)
  }

  private onTasks(tasks: { items: Task[]; seq: number }): void {
    this.send(Type.RECEIVED, [tasks.seq]); // before any of its jobs starts
    if (this.draining) {
      this.send(Type.BYE, [tasks.items.map((t) => p.refWire(refOf(t)))]);
      return;
    }
    for (const task of tasks.items) {
      const key = keyOf(task);
      const held = this.held.get(key);
      const result = this.unconfirmed.get(key);
      if (held?.token === task.token || result?.ref.token === task.token) {
        // A delivery it holds, or ran, arriving again: started once only (protocol §3.3).
        this.log("warn", `job ${task.id} delivered again with the same token ${task.token}: not started twice`);
        continue;
      }
      if (held !== undefined) this.replace(held);
      this.held.set(key, task);
      this.unconfirmed.delete(key);
      if (p.checksum(task.payload) !== task.payloadChecksum) {
        this.finished.push([task, this.result(task, Outcome.FAILED_FINAL, "payload corrupted: its XXH3-64 does not match payload_checksum")]);
        continue;
      }
      this.jobs.set(key, new Job(task, this.progress));
      if (task.startCheck === 0 && this.alonePending()) this.heldBack.push(task);
      else if (task.startCheck === 0) this.ready.push(task);
      else this.toAnnounce.push(task);
    }
    this.startReady();
  }

  /** A newer delivery of a job replaces the one held: the older one no longer
   * starts (if its handler runs, its result is stale and dropped), and is no
   * longer announced. */
  private replace(older: Task): void {
    const key = keyOf(older);
    this.ready = this.ready.filter((t) => t !== older);
    this.toAnnounce = this.toAnnounce.filter((t) => t !== older);
    this.heldBack = this.heldBack.filter((t) => t !== older);
    if (this.awaitingGo.get(key) === older) this.awaitingGo.delete(key);
    if (!this.running.has(key)) this.announced.delete(`${key}\0${older.token}`);
  }

  /** A start_check 2 task waits to be announced, or is announced and its result
   * not confirmed: nothing else starts meanwhile, so that a crash names it alone. */
  private alonePending(): boolean {
    return [...this.announced.values()].includes(2) || this.toAnnounce.some((t) => t.startCheck === 2);
  }

  /** STARTING for the announced tasks the pool can start soon; a start_check 2
   * task only when nothing else runs or awaits its CONFIRM. */
  private announce(): void {
    if (this.heldBack.length > 0 && !this.alonePending()) {
      this.ready.push(...this.heldBack);
      this.heldBack = [];
      this.startReady();
    }
    if (this.toAnnounce.length === 0 || this.draining || [...this.announced.values()].includes(2)) return;
    const busy = this.running.size + this.ready.length;
    const idle = this.concurrency - busy;
    const batch: Task[] = [];
    while (this.toAnnounce.length > 0 && idle - this.awaitingGo.size - batch.length > 0) {
      if (this.toAnnounce[0]!.startCheck === 2) {
        if (batch.length === 0 && this.announced.size === 0 && busy === 0) batch.push(this.toAnnounce.shift()!);
        break;
      }
      batch.push(this.toAnnounce.shift()!);
    }
    for (const task of batch) {
      this.awaitingGo.set(keyOf(task), task);
      this.announced.set(`${keyOf(task)}\0${task.token}`, task.startCheck);
    }
    if (batch.length > 0) {
      this.sendFinished(); // what ran before is reported first
      this.send(Type.STARTING, [batch.map((t) => p.refWire(refOf(t)))]);
    }
  }

  private onStartReply(go: JobRef[], drop: JobRef[]): void {
    for (const ref of go) {
      const task = this.awaitingGo.get(keyOf(ref));
      if (task === undefined || task.token !== ref.token) continue; // an older delivery's answer
      this.awaitingGo.delete(keyOf(ref));
      this.ready.unshift(task);
    }
    for (const ref of drop) {
      const key = keyOf(ref);
      this.announced.delete(`${key}\0${ref.token}`);
      if (this.awaitingGo.get(key)?.token === ref.token) this.awaitingGo.delete(key);
      const task = this.held.get(key);
      if (task !== undefined && task.token === ref.token) this.forget(task);
    }
    this.startReady();
  }

  private onCancel(ref: JobRef): void {
    const key = keyOf(ref);
    const task = this.held.get(key);
    if (task === undefined || task.token !== ref.token) return; // not a delivery it holds
    const job = this.jobs.get(key);
    if (this.running.has(key) && job !== undefined) {
      job.cancel(); // the handler is asked to stop; its end reports `cancelled`
      return;
    }
    this.ready = this.ready.filter((t) => t !== task);
    this.toAnnounce = this.toAnnounce.filter((t) => t !== task);
    this.heldBack = this.heldBack.filter((t) => t !== task);
    if (this.awaitingGo.get(key) === task) this.awaitingGo.delete(key);
    this.finished.push([task, this.result(task, Outcome.CANCELLED, "cancelled before it started")]);
  }

  private onError(error: p.ErrorReply): void {
    if (error.code === "unknown_worker") {
      this.welcomed = false; // the broker restarted or declared it lost; results follow WELCOME
      this.sayHello();
    } else if (error.code === "not_leader") {
      this.log("info", `${this.endpoints.current} stands by: ${error.message}`);
      this.move();
    } else {
      this.log("warn", `broker error ${error.code}: ${error.message}`);
    }
  }

  // -- running handlers

  private result(task: Task, outcome: Outcome, error = "", extra: { snoozeMs?: number; result?: Uint8Array } = {}): Result {
    return { ref: refOf(task), outcome, error, snoozeMs: extra.snoozeMs ?? 0, result: extra.result ?? new Uint8Array() };
  }

  private startReady(): void {
    while (this.ready.length > 0 && this.running.size < this.concurrency) {
      const task = this.ready.shift()!;
      const key = keyOf(task);
      const job = this.jobs.get(key);
      if (job === undefined) continue;
      this.running.add(key);
      void this.execute(task, job).then((result) => {
        this.running.delete(key);
        this.finished.push([task, result]);
        this.sendFinished();
        this.announce();
        this.startReady();
      });
    }
  }

  private async execute(task: Task, job: Job): Promise<Result> {
    if (task.startByMs > 0 && Date.now() > task.startByMs) {
      // Too late to matter: not started (docs/jobs.md, start-by deadlines).
      return this.result(task, Outcome.EXPIRED, `expired: not started by ${new Date(task.startByMs).toISOString()}`);
    }
    const handler = this.handlers.get(task.type);
    if (handler === undefined) return this.result(task, Outcome.FAILED, `no handler for job type '${task.type}'`);
    job.setRunning(true);
    try {
      const returned = await handler(job);
      if (job.cancelled) return this.result(task, Outcome.CANCELLED);
      const result = returned === undefined ? new Uint8Array() : p.toBytes(returned);
      if (result.length > p.MAX_RESULT_BYTES)
        return this.result(task, Outcome.FAILED_FINAL, `its result of ${result.length} bytes is over the ${p.MAX_RESULT_BYTES}-byte limit`);
      return this.result(task, Outcome.DONE, "", { result });
    } catch (error) {
      if (job.cancelled) return this.result(task, Outcome.CANCELLED, String((error as Error)?.message ?? error));
      if (error instanceof Snooze) return this.result(task, Outcome.SNOOZED, error.message, { snoozeMs: error.delayMs });
      if (error instanceof Fail) return this.result(task, Outcome.FAILED_FINAL, error.message);
      return this.result(task, Outcome.FAILED, error instanceof Error ? error.stack ?? error.message : String(error));
    } finally {
      job.setRunning(false);
    }
  }

  private sendFinished(): void {
    const batch: unknown[] = [];
    for (const [task, result] of this.finished) {
      const key = keyOf(task);
      const current = this.held.get(key);
      if (current === undefined || current.token !== task.token) {
        // A newer delivery replaced it: its result is not sent.
        this.announced.delete(`${key}\0${task.token}`);
        continue;
      }
      this.forget(task, true);
      this.unconfirmed.set(key, result);
      batch.push(p.resultWire(result));
    }
    this.finished = [];
    if (!this.welcomed) return; // sent after the WELCOME
    for (let i = 0; i < batch.length; i += RESULT_BATCH) this.send(Type.RESULTS, [batch.slice(i, i + RESULT_BATCH)]);
  }

  private confirmed(ref: JobRef): void {
    const key = keyOf(ref);
    if (this.unconfirmed.get(key)?.ref.token === ref.token) this.unconfirmed.delete(key);
    this.announced.delete(`${key}\0${ref.token}`);
  }

  private forget(task: Task, keepAnnounced = false): void {
    const key = keyOf(task);
    this.held.delete(key);
    this.jobs.delete(key);
    if (!keepAnnounced) this.announced.delete(`${key}\0${task.token}`);
  }

  // -- draining

  private startDrain(now: number): void {
    this.draining = true;
    this.drainDeadline = now + this.drainTimeoutMs;
    const unstarted = [...this.ready, ...this.heldBack, ...this.toAnnounce, ...this.awaitingGo.values()];
    this.ready = [];
    this.heldBack = [];
    this.toAnnounce = [];
    this.awaitingGo.clear();
    for (const task of unstarted) this.forget(task);
    this.log("info", `draining: handing back ${unstarted.length} jobs not started`);
    this.send(Type.BYE, [unstarted.map((t) => p.refWire(refOf(t)))]);
    this.send(Type.HEARTBEAT, [[...this.held.values()].map((t) => p.refWire(refOf(t))), this.capacity, true]);
  }

  private drained(now: number): boolean {
    const busy = this.running.size > 0 || this.finished.length > 0;
    if (busy && now < this.drainDeadline) return false;
    if (busy) {
      for (const key of this.running) this.jobs.get(key)?.cancel();
      this.log("warn", `drain timeout: left ${this.running.size} running jobs to be re-delivered`);
      return true;
    }
    // The last results wait briefly for their CONFIRM (a result applies at most once either way).
    this.confirmDeadline ??= now + 2000;
    return this.unconfirmed.size === 0 || now > this.confirmDeadline;
  }

  private finish(): void {
    clearInterval(this.timer);
    // Let the last frames (BYE, results) leave before the socket closes.
    const socket = this.socket;
    const sender = this.sender;
    this.socket = undefined;
    this.sender = undefined;
    void (sender?.idle() ?? Promise.resolve()).then(() => {
      socket?.close();
      this.done?.();
    });
  }
}
