// Run by package_check.sh from the project the package was installed into:
// a job enqueued with a W3C trace context reaches its Node.js handler with
// it (the handler returns it as its result), its fields show it, and a
// malformed one is rejected. Exits 0 when all hold.
import { Producer, Rejected, Worker } from "dueq";

const [endpoint] = process.argv.slice(2);
const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const worker = new Worker(endpoint, ["trace"], { log: null });
worker.handle("trace", (job) => `${job.traceparent} ${job.tracestate}`);
const running = worker.run();
const producer = new Producer(endpoint, { timeoutMs: 10_000 });
const fail = (what) => {
  console.error(what);
  process.exit(1);
};
await producer.enqueue({ queue: "trace", type: "trace", id: "t-1", traceparent: parent, tracestate: "rojo=1" });
const end = await producer.wait("t-1", "trace", 20_000);
const got = new TextDecoder().decode(end.result);
if (end.state !== "done" || got !== `${parent} rojo=1`) fail(`the handler got ${got} (${end.state})`);
await producer.enqueue({ queue: "trace", type: "trace", id: "t-later", delayMs: 3_600_000, traceparent: parent, tracestate: "rojo=1" });
const fields = await producer.job("t-later", "trace");
if (fields?.tp !== parent || fields?.ts !== "rojo=1") fail(`the job's fields: ${JSON.stringify(fields)}`);
try {
  await producer.enqueue({ queue: "trace", type: "trace", traceparent: "00-not-a-trace-01" });
  fail("a malformed traceparent was accepted");
} catch (error) {
  if (!(error instanceof Rejected) || !error.message.includes("traceparent")) fail(`refused how? ${error}`);
}
producer.close();
worker.stop();
await running;
console.log("trace context: handed to the handler, shown, a malformed one rejected");
