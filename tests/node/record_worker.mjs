// A Node.js worker for the tests (the conformance suite's worker under test):
// handlers noop, sleep (payload = ms; reports progress as it sleeps; stops
// when cancelled), fail, echo (returns its payload) and snooze_once
// (payload = ms: snoozes a job's first run); each start appends
// `id attempt token start_us pid key` to --record (start_us: the wall clock
// in microseconds; key: the job's key in hex, - for none).
import { appendFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { Snooze, Worker, curveKeysFromFiles } from "../../clients/node/dist/index.js";

const { values: args } = parseArgs({
  options: {
    broker: { type: "string", multiple: true },
    queue: { type: "string", multiple: true },
    concurrency: { type: "string", default: "4" },
    record: { type: "string" },
    "broker-pub": { type: "string" },
    key: { type: "string" },
  },
});
if (!args.broker || !args.queue || !args.record) {
  console.error("usage: record_worker.mjs --broker E --queue Q --record FILE [--concurrency N]");
  process.exit(2);
}
const keys = args.key ? curveKeysFromFiles(args["broker-pub"], args.key) : undefined;
const worker = new Worker(args.broker, args.queue, { concurrency: Number(args.concurrency), keys });
const record = args.record;
const wallUs = () => Math.floor((performance.timeOrigin + performance.now()) * 1000);
const note = (job) => {
  const key = job.key.length ? Buffer.from(job.key).toString("hex") : "-";
  appendFileSync(record, `${job.id} ${job.attempt} ${job.token} ${wallUs()} ${process.pid} ${key}\n`);
};
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

worker.handle("noop", (job) => note(job));
worker.handle("sleep", async (job) => {
  note(job);
  const ms = Number(job.text || "0");
  const start = Date.now();
  while (Date.now() - start < ms && !job.cancelled) {
    const slept = Date.now() - start;
    job.progress(Math.floor((slept * 100) / ms), `${job.id} slept ${slept} of ${ms} ms`);
    await pause(5);
  }
});
worker.handle("echo", (job) => {
  note(job);
  return job.payload;
});
worker.handle("fail", (job) => {
  note(job);
  throw new Error("failed on purpose");
});
const snoozed = new Set();
worker.handle("snooze_once", (job) => {
  note(job);
  if (!snoozed.has(job.id)) {
    snoozed.add(job.id);
    throw new Snooze({ delayMs: Number(job.text || "0"), reason: "not yet" });
  }
});

await worker.run();
console.log("drained and stopped");
