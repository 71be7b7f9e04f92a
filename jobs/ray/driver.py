"""A Ray driver on node 0 of a gpujob Ray cluster (`launcher: ray`): gpujob started the head
here and joined the other nodes to it before this runs, so `ray.init()` finds the cluster
(RAY_ADDRESS). One task is pinned to each node; each says where it ran."""

from __future__ import annotations

import socket
import sys

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
def where() -> str:
    return f"{ray.util.get_node_ip_address()} ({socket.gethostname()})"


def main() -> None:
    ray.init(logging_level="ERROR")
    nodes = sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeManagerAddress"])
    sys.stdout.write(f"driver: {len(nodes)} node(s) in the cluster\n")
    pinned = [
        where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
        for n in nodes
    ]
    for index, answer in enumerate(ray.get([task.remote() for task in pinned])):
        sys.stdout.write(f"task on node {index}: ran at {answer}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
