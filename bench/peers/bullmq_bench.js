// BullMQ on the scenarios dueq-bench measures dueq with (issue 14), against
// a Redis that dueq-bench started with the settings dueq's scenarios use.
// Prints one JSON object of figures as its last line of stdout.
//
//   node bullmq_bench.js --port P --scenario single|low_rate|defaults [--seconds S] [--jobs N]
//                        [--sweep 1x32,1x100,...]
//
// Workers run in child processes (this file with --worker), as dueq's
// workers do; the producer runs here, with one connection and 50 adds in
// flight. 100-byte payloads. BullMQ gets its best settings: each scenario
// runs every worker layout of --sweep (processes x concurrency; the low
// rate: one process at each concurrency, and at BullMQ's default of 1) on
// a fresh queue and reports the best, with each layout's figure beside it.
'use strict';
const { Queue, Worker } = require('bullmq');
const { fork } = require('child_process');

function parseArgs(argv) {
  const args = { seconds: 10, jobs: 100000, concurrency: 1, sweep: '1x32,1x64,1x100,1x200,2x32,2x100' };
  for (let i = 2; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, '');
    if (name === 'worker' || name === 'record') args[name] = true;
    else args[name] = argv[++i];
  }
  for (const k of ['port', 'seconds', 'jobs', 'concurrency']) args[k] = Number(args[k]);
  if (!Number.isFinite(args.port) || args.port <= 0) throw new Error('--port is required');
  args.layouts = String(args.sweep).split(',').map(layout => {
    const [processes, concurrency] = layout.split('x').map(Number);
    if (!(processes >= 1 && concurrency >= 1)) throw new Error(`--sweep: "${layout}" is not PROCESSESxCONCURRENCY`);
    return { processes, concurrency };
  });
  return args;
}

const nowMs = () => performance.timeOrigin + performance.now();  // wall clock, sub-millisecond
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const payload = { p: 'x'.repeat(100) };

function connection(port) {
  return { host: '127.0.0.1', port, maxRetriesPerRequest: null };
}

function percentile(values, p) {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

// Child: one BullMQ Worker with a no-op processor. With --record it keeps
// each job's enqueue-to-start time (the job carries its send time).
async function runWorker(args) {
  const latencies = [];
  const worker = new Worker(
    args.queue,
    async job => {
      if (args.record) latencies.push(nowMs() - job.data.sent_ms);
    },
    { connection: connection(args.port), concurrency: args.concurrency },
  );
  await worker.waitUntilReady();
  process.on('message', async message => {
    if (message === 'stop') {
      await worker.close();
      process.send({ latencies }, () => process.exit(0));
    }
  });
  process.send('ready');
}

function startWorkers(args, queue, count, extra = []) {
  const children = [];
  const ready = [];
  for (let i = 0; i < count; i++) {
    const child = fork(__filename, ['--worker', '--port', String(args.port), '--queue', queue, ...extra]);
    children.push(child);
    ready.push(new Promise((resolve, reject) => {
      child.once('message', m => (m === 'ready' ? resolve() : reject(new Error('worker did not start'))));
      child.once('exit', code => reject(new Error(`worker exited with ${code}`)));
    }));
  }
  return { children, ready: Promise.all(ready) };
}

async function stopWorkers(children) {
  const reports = children.map(child => new Promise(resolve => {
    child.removeAllListeners('message');
    child.removeAllListeners('exit');
    child.once('message', resolve);
    child.send('stop');
  }));
  return Promise.all(reports);
}

// The best worker layout of a sweep: runs `measure(queueName, layout)` once
// per layout, each on its own queue, and reports the figures of the layout
// that `better` prefers, with every layout's `key` beside them
// (sweep_PxC_<key>).
async function bestLayout(layouts, prefix, key, better, measure) {
  let best = null;
  const sweep = {};
  for (const [i, layout] of layouts.entries()) {
    const figures = await measure(`${prefix}-${i}`, layout);
    sweep[`sweep_${layout.processes}x${layout.concurrency}_${key}`] = figures[key];
    if (best === null || better(figures[key], best[key])) {
      best = { ...figures, best_processes: layout.processes, best_concurrency: layout.concurrency };
    }
  }
  return { ...best, ...sweep };
}
const faster = (a, b) => a > b;
const sooner = (a, b) => a < b;

// One producer with 50 queue.add calls outstanding on its one connection:
// completed jobs/s over the window, and the add call's latency.
async function single(args) {
  return bestLayout(args.layouts, 'single', 'jobs_per_s', faster, async (name, layout) => {
    const queue = new Queue(name, { connection: connection(args.port) });
    const { children, ready } = startWorkers(args, name, layout.processes, ['--concurrency', String(layout.concurrency)]);
    await ready;
    let running = true;
    const latencies = [];
    const producers = Array.from({ length: 50 }, async () => {
      while (running) {
        const t0 = nowMs();
        await queue.add('noop', payload);
        latencies.push(nowMs() - t0);
      }
    });
    await sleep(1000);  // warm-up
    const c0 = await queue.getCompletedCount(), t0 = nowMs();
    await sleep(args.seconds * 1000);
    const c1 = await queue.getCompletedCount(), t1 = nowMs();
    running = false;
    await Promise.all(producers);
    await stopWorkers(children);
    await queue.obliterate({ force: true });
    await queue.close();
    return {
      jobs_per_s: (c1 - c0) / ((t1 - t0) / 1000),
      add_p50_ms: percentile(latencies, 50),
      add_p99_ms: percentile(latencies, 99),
    };
  });
}

// 1,000 single-job adds per second to one worker process: enqueue-to-start
// time, at the concurrency of the sweep with the lowest p99.
async function lowRate(args) {
  const layouts = [...new Set(args.layouts.map(l => l.concurrency))].map(concurrency => ({ processes: 1, concurrency }));
  return bestLayout([{ processes: 1, concurrency: 1 }, ...layouts], 'low', 'p99_ms', sooner, async (name, layout) => {
    const queue = new Queue(name, { connection: connection(args.port) });
    const { children, ready } = startWorkers(args, name, 1, ['--record', '--concurrency', String(layout.concurrency)]);
    await ready;
    const start = nowMs(), end = start + args.seconds * 1000;
    const adds = [];
    for (let next = start; next < end; next += 1) {
      const wait = next - nowMs();
      if (wait >= 1) await sleep(wait);  // timers have millisecond resolution: late ones catch up at once
      adds.push(queue.add('noop', { p: 'x'.repeat(100), sent_ms: nowMs() }));
    }
    await Promise.all(adds);
    while ((await queue.getCompletedCount()) < adds.length) await sleep(20);
    const [report] = await stopWorkers(children);
    await queue.obliterate({ force: true });
    await queue.close();
    return {
      jobs: report.latencies.length,
      p50_ms: percentile(report.latencies, 50),
      p99_ms: percentile(report.latencies, 99),
      max_ms: percentile(report.latencies, 100),
    };
  });
}

// `jobs` ready jobs (addBulk, 1,000 per call) drained by the workers,
// timed from the moment they are started.
async function defaults(args) {
  return bestLayout(args.layouts, 'bulk', 'jobs_per_s', faster, async (name, layout) => {
    const queue = new Queue(name, { connection: connection(args.port) });
    for (let at = 0; at < args.jobs; at += 1000) {
      const n = Math.min(1000, args.jobs - at);
      await queue.addBulk(Array.from({ length: n }, () => ({ name: 'noop', data: payload })));
    }
    const t0 = nowMs();
    const { children, ready } = startWorkers(args, name, layout.processes, ['--concurrency', String(layout.concurrency)]);
    await ready;
    while ((await queue.getCompletedCount()) < args.jobs) await sleep(2);
    const elapsed = (nowMs() - t0) / 1000;
    await stopWorkers(children);
    await queue.obliterate({ force: true });
    await queue.close();
    return { jobs_per_s: args.jobs / elapsed };
  });
}

async function main() {
  const args = parseArgs(process.argv);
  if (args.worker) return runWorker(args);
  const scenarios = { single, low_rate: lowRate, defaults };
  const run = scenarios[args.scenario];
  if (!run) throw new Error(`--scenario must be one of ${Object.keys(scenarios).join(', ')}`);
  const figures = await run(args);
  console.log(JSON.stringify(figures));
  process.exit(0);
}

main().catch(error => {
  console.error(`bullmq_bench: ${error.stack || error}`);
  process.exit(1);
});
