// dueq for Node.js: a Producer and a Worker over the broker's ZeroMQ protocol
// (docs/protocol.md).
export { curveKeysFromFiles, type CurveKeys } from "./connection.js";
export { DueqError, Producer, Rejected, type FlowJob, type GroupResult, type GroupView, type JobSpec, type ProducerOptions } from "./producer.js";
export { Fail, Job, Snooze, Worker, type Handler, type WorkerOptions } from "./worker.js";
export { EnqueueStatus, Outcome, checksum, type AdminResult, type EnqueueResult, type JobEnd, type QueueStats } from "./protocol.js";
