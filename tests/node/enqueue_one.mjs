// Enqueues one job with the Node.js Producer and exits 0 once the broker has
// it (accepted, or duplicate after a resend): the producer under test of the
// conformance suite's producer cases.
import { parseArgs } from "node:util";

import { EnqueueStatus, Producer } from "../../clients/node/dist/index.js";

const { values: args } = parseArgs({ options: { broker: { type: "string" }, queue: { type: "string" }, id: { type: "string" } } });
const producer = new Producer(args.broker, { timeoutMs: 20_000 });
const result = await producer.enqueue({ queue: args.queue, type: "noop", payload: "conformance", id: args.id });
producer.close();
console.log(result.id, EnqueueStatus[result.status]);
process.exit(result.status === EnqueueStatus.ACCEPTED || result.status === EnqueueStatus.DUPLICATE ? 0 : 1);
