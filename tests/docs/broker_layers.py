#!/usr/bin/env python3
"""Rule: broker/ is layered as docs/architecture.md says. A file includes
headers of its own folder or of a folder below it, never above:

    config < store < loop < admin < http < broker/ itself (the event loop's wiring)

and no two files include each other, directly or through others (a .cpp
and its .hpp count as one file). Prints each include that breaks the rule."""
import os
import re
import sys

LAYERS = ["config", "store", "loop", "admin", "http", ""]
root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
broker = os.path.join(root, "broker")
include = re.compile(r'^\s*#\s*include\s+"broker/([^"]+)"', re.M)


def layer_of(relative):  # "loop/dispatcher.hpp" -> "loop"; "broker.hpp" -> ""
    return relative.split("/")[0] if "/" in relative else ""


def unit_of(relative):  # a .cpp and its .hpp are one node
    return relative.rsplit(".", 1)[0]


problems = []
edges = {}
for folder, _, names in os.walk(broker):
    for name in sorted(names):
        if not name.endswith((".cpp", ".hpp")):
            continue
        path = os.path.join(folder, name)
        relative = os.path.relpath(path, broker)
        here = layer_of(relative)
        if here not in LAYERS:
            problems.append(f"broker/{relative}: in a folder no layer names ({here})")
            continue
        for target in include.findall(open(path, encoding="utf-8").read()):
            if target in ("redis_conf.hpp", "dashboard_page.hpp"):  # generated at build time
                continue
            there = layer_of(target)
            if there not in LAYERS:
                problems.append(f"broker/{relative} includes broker/{target}: not a layer's folder")
            elif LAYERS.index(there) > LAYERS.index(here):
                problems.append(f"broker/{relative} ({here or 'broker'}) includes broker/{target} ({there or 'broker'}), a layer above it")
            if unit_of(target) != unit_of(relative):
                edges.setdefault(unit_of(relative), set()).add(unit_of(target))

# File-level include cycles: a depth-first search that reports each back edge.
state = {}


def visit(node, stack):
    state[node] = "open"
    for nxt in sorted(edges.get(node, ())):
        if state.get(nxt) == "open":
            cycle = stack[stack.index(nxt):] + [nxt]
            problems.append("include cycle: " + " -> ".join("broker/" + n for n in cycle))
        elif nxt not in state:
            visit(nxt, stack + [nxt])
    state[node] = "done"


for node in sorted(edges):
    if node not in state:
        visit(node, [node])

for p in problems:
    print(p)
if problems:
    print(f"{len(problems)} problems")
    sys.exit(1)
print(f"{sum(len(v) for v in edges.values())} includes between broker files, all downward, no cycle")
