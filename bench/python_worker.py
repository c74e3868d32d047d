"""The Python package's Worker with a handler that does nothing, for
dueq-bench's python_worker scenario: what the package itself costs per job."""

import argparse

import dueq

parser = argparse.ArgumentParser()
parser.add_argument("--broker", required=True)
parser.add_argument("--queue", required=True)
parser.add_argument("--concurrency", type=int, default=4)
args = parser.parse_args()
worker = dueq.Worker(args.broker, [args.queue], concurrency=args.concurrency)
worker.handle("noop")(lambda job: None)
worker.run()
