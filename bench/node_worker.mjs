// The Node.js package's Worker with a handler that does nothing, for
// dueq-bench's node_worker scenario: what the package itself costs per job.
import { parseArgs } from "node:util";

import { Worker } from "../clients/node/dist/index.js";

const { values: args } = parseArgs({
  options: { broker: { type: "string" }, queue: { type: "string" }, concurrency: { type: "string", default: "16" } },
});
const worker = new Worker(args.broker, [args.queue], { concurrency: Number(args.concurrency), log: null });
worker.handle("noop", () => {});
await worker.run();
