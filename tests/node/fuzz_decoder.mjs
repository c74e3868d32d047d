// Seeded mutation fuzzing of the Node.js package's frame decoder and field
// readers (clients/node/src/protocol.ts), as the C++ decoder's
// Protocol.FuzzedFrames… test does: the documented example of every frame
// type (conformance/frames) and the C++ fuzzer's committed corpus, each
// mutated by flipped, inserted and deleted bytes, go through decode() and
// the reader the worker or producer uses for that type. Whatever the bytes,
// the only error may be BadFrame (the worker drops those and goes on; any
// other error would end its process), with a reason; both the refused and
// the read path must run often.
//   node fuzz_decoder.mjs [--seed N] [--iterations N]
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import * as p from "../../clients/node/dist/protocol.js";

const { values: args } = parseArgs({
  options: { seed: { type: "string", default: "20261207" }, iterations: { type: "string", default: "100000" } },
});
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

// The readers each frame type meets in a client (worker.ts onFrame, the
// producer's requests): the body of every type a client is sent.
const readers = {
  [p.Type.WELCOME]: (b) => p.readWelcome(b),
  [p.Type.PONG]: (b) => p.str(p.fields(b, 1, "PONG")[0], "broker_id"),
  [p.Type.CONFIRM]: (b) => p.readRefs(p.fields(b, 1, "CONFIRM")[0], "CONFIRM items"),
  [p.Type.CANCEL]: (b) => p.readRef(p.fields(b, 1, "CANCEL")[0]),
  [p.Type.ENQUEUE_REPLY]: (b) => p.readEnqueueReply(b),
  [p.Type.STATS_REPLY]: (b) => p.readStatsReply(b),
  [p.Type.JOB_REPLY]: (b) => p.readJobReply(b),
  [p.Type.ADMIN_REPLY]: (b) => p.readAdminReply(b),
  [p.Type.TASKS]: (b) => p.readTasks(b),
  [p.Type.ERROR]: (b) => p.readError(b),
  [p.Type.START_REPLY]: (b) => p.readStartReply(b),
  [p.Type.WAIT_REPLY]: (b) => p.readWaitReply(b),
};

function seeds() {
  const out = [];
  const frames = join(root, "conformance", "frames");
  for (const name of readdirSync(frames).sort()) out.push(readFileSync(join(frames, name)));
  const corpus = join(root, "tests", "fuzz", "corpus", "frame_decoder");
  for (const name of readdirSync(corpus).sort()) out.push(readFileSync(join(corpus, name)));
  // Only frames of a type a client is sent: the others are refused by type
  // before any reader would see their mutations.
  return out.filter((bytes) => {
    try {
      return readers[p.decode(bytes, true)[0]] !== undefined;
    } catch {
      return false;
    }
  });
}

// xorshift32: the same mutations for the same seed on every machine.
let state = Number(args.seed) >>> 0 || 1;
function next() {
  state ^= state << 13;
  state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5;
  state >>>= 0;
  return state;
}

function mutate(seed) {
  const bytes = Array.from(seed);
  const edits = 1 + (next() % 4);
  for (let e = 0; e < edits && bytes.length > 0; ++e) {
    const at = next() % bytes.length;
    switch (next() % 3) {
      case 0: bytes[at] = next() & 0xff; break;
      case 1: bytes.splice(at, 0, next() & 0xff); break;
      default: bytes.splice(at, 1);
    }
  }
  return Uint8Array.from(bytes);
}

// Returns "read" or "refused"; throws what is not a BadFrame.
function readFrame(bytes, reply) {
  try {
    const [type, body] = p.decode(bytes, reply);
    const reader = readers[type];
    if (reader === undefined) return "refused"; // a client is never sent this type: dropped
    reader(body);
    return "read";
  } catch (error) {
    if (!(error instanceof p.BadFrame)) throw error;
    if (!error.message) throw new Error("a BadFrame without a reason");
    return "refused";
  }
}

const all = seeds();
let examples = 0;
for (const name of readdirSync(join(root, "conformance", "frames"))) {
  const bytes = readFileSync(join(root, "conformance", "frames", name));
  const [type] = p.decode(bytes, true);
  if (readers[type] === undefined) continue;
  if (readFrame(bytes, true) !== "read") {
    console.error(`FAIL the documented ${p.Type[type]} example (${name}) is not read`);
    process.exit(1);
  }
  examples += 1;
}
const counts = { read: 0, refused: 0 };
const iterations = Number(args.iterations);
for (let i = 0; i < iterations; ++i) {
  const bytes = mutate(all[next() % all.length]);
  try {
    counts[readFrame(bytes, i % 2 === 0)] += 1;
  } catch (error) {
    console.error(`FAIL iteration ${i} (seed ${args.seed}): ${error?.constructor?.name}: ${error?.message}`);
    console.error(`     frame: ${Buffer.from(bytes).toString("hex")}`);
    process.exit(1);
  }
}
console.log(`${examples} documented examples read; ${all.length} seeds, ${iterations} mutated frames: ${counts.read} read, ${counts.refused} refused as BadFrame`);
// Most mutations break the msgpack or a field's type; one in a hundred or
// more must still be read.
if (counts.read < iterations / 100 || counts.refused < iterations / 100) {
  console.error("FAIL the mutations were all harmless or all fatal: both paths must run");
  process.exit(1);
}
