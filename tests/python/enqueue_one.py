"""Enqueues one job with the Python Producer and exits 0 once the broker
has it (accepted, or duplicate after a resend): the producer under test of
the conformance suite's producer cases."""

import argparse
import sys

import dueq

parser = argparse.ArgumentParser()
parser.add_argument("--broker", required=True)
parser.add_argument("--queue", required=True)
parser.add_argument("--id", required=True)
args = parser.parse_args()
with dueq.Producer(args.broker, timeout=20) as producer:
    result = producer.enqueue(args.queue, "noop", b"conformance", id=args.id)
print(result.id, result.status.name)
sys.exit(0 if result.status in (dueq.EnqueueStatus.ACCEPTED, dueq.EnqueueStatus.DUPLICATE) else 1)
