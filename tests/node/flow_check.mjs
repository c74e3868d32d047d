// Run by package_check.sh from the project the package was installed into:
// a flow's parent runs after its children and reads their results; a
// batch's callbacks run after its members; a flow too deep is rejected
// whole. Exits 0 when all hold.
import { Producer, Worker } from "dueq";

const [endpoint] = process.argv.slice(2);
const started = [];
const worker = new Worker(endpoint, ["flows"], { log: null });
worker.handle("step", (job) => {
  started.push(job.id);
  return job.payload;
});
const running = worker.run();
const producer = new Producer(endpoint, { timeoutMs: 10_000 });
const fail = (what) => {
  console.error(what);
  process.exit(1);
};
const step = (id, payload = "") => ({ queue: "flows", type: "step", id, payload });
const put = await producer.enqueueFlow({
  job: step("parent"),
  children: [{ job: step("a", "result a") }, { job: step("b", new Uint8Array([0x62, 0xff])), onFailure: "ignore" }],
});
if (put.status !== "accepted" || put.ids.join(",") !== "parent,a,b") fail(`the flow: ${JSON.stringify(put)}`);
const end = await producer.wait("parent", "flows", 20_000);
if (end.state !== "done") fail(`the parent ended ${end.state}`);
if (started.indexOf("parent") < Math.max(started.indexOf("a"), started.indexOf("b"))) fail(`started in order ${started}`);
const view = await producer.children("flows", "parent");
const results = Object.fromEntries(view.members.map((m) => [m.member, m.result]));
if (view.status.state !== "settled" || results.a !== "result a") fail(`the children: ${JSON.stringify(view)}`);
if ((await producer.enqueueFlow({ job: step("parent") })).status !== "duplicate") fail("a resent flow was not a duplicate");
const opened = await producer.openBatch("flows", "nightly", [step("m1")], { onComplete: step("over") });
const added = await producer.addToBatch("flows", "nightly", [step("m2")], true);
if (opened.status !== "accepted" || added.status !== "accepted") fail(`the batch: ${opened.status} ${added.status}`);
if ((await producer.wait("over", "flows", 20_000)).state !== "done") fail("the complete callback did not run");
const status = await producer.batchStatus("flows", "nightly");
if (status.status.total !== "2" || status.status.done !== "2") fail(`the batch's status: ${JSON.stringify(status.status)}`);
let deep = { job: step("d5") };
for (let level = 4; level >= 1; level--) deep = { job: step(`d${level}`), children: [deep] };
const refused = await producer.enqueueFlow(deep);
if (refused.status !== "rejected" || refused.jobIndex !== 4) fail(`a flow of 5 levels: ${JSON.stringify(refused)}`);
producer.close();
worker.stop();
await running;
console.log("flows and batches: the parent after its children, the callback after the members, too deep rejected");
