"""Two GPUs through gpujob: DDP scaling (1 rank vs 2 ranks on one node) and the same job as
`nodes: 2` with one GPU each (two agents on one machine, c10d rendezvous on loopback).

    python3 bench/gpu_multi.py [--gpu-name H200]
"""

from __future__ import annotations

import argparse
import re
import sys

from gpu_runs import through_gpujob


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpu-name", default="H200")
    args = parser.parse_args()
    gpu = args.gpu_name
    base = ["profile=gpu", "batch.micro_batch=8", "checkpoints.every_steps=100000"]  # no save
    runs = {
        "1 GPU, 1 rank": [*base, f"resources.accelerators={gpu}:1", "run.nproc_per_node=1",
                          "batch.global_batch=8"],
        "1 node x 2 ranks (DDP)": [*base, f"resources.accelerators={gpu}:2",
                                   "run.nproc_per_node=2", "batch.global_batch=16"],
        "2 nodes x 1 rank (c10d)": [*base, f"resources.accelerators={gpu}:1", "nodes=2",
                                    "run.nproc_per_node=1", "batch.global_batch=16"],
    }  # fmt: skip
    tps = {}
    for label, sets in runs.items():
        result = through_gpujob("jobs/quickstart.yaml", sets, re.sub(r"\W+", "-", label).strip("-"))
        text = result.output.decode(errors="replace")
        if result.exit_code != 0 or result.steady_tokens_per_s is None:
            sys.stdout.write(text[-3000:])
            print(f"{label}: failed with exit code {result.exit_code}")
            return 1
        tps[label] = result.steady_tokens_per_s
        worlds = sorted(set(re.findall(r"rank \d+/(\d+): ready", text)))
        nodes = sorted(set(re.findall(r"^\[node (\d+)\]", text, re.M)))
        print(
            f"{label:26s} steady tokens/s {result.steady_tokens_per_s:10.0f}  "
            f"world size {','.join(worlds)}  node prefixes {','.join(nodes) or '-'}  "
            f"first step {result.first_step_s:.1f} s"
        )
    one = tps["1 GPU, 1 rank"]
    for label in list(runs)[1:]:
        print(f"scaling efficiency, {label}: {tps[label] / (2 * one):.3f} (tokens/s / (2 x 1 GPU))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
