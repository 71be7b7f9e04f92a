"""Dry-run planning at 10, 100 and 1000 nodes: wall time and peak RSS of
`gpujob submit SPEC --dry-run` (a local job of N nodes), each in its own subprocess, and the
cost of each node added over the 10-node run. Planning is linear when that per-node cost
stays the same from 100 to 1000 nodes (issue 26: 1000 nodes under 300 MB and 5 s).

Each run is a fresh Python that starts gpujob and reports `resource.getrusage` of its
children, so the peak RSS is that one gpujob's. Medians of --runs runs.

    .venv/bin/python bench/dry_run_scale.py [--runs 3] [--repo PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

NODES = (10, 100, 1000)
SPEC = "name: scale\nimage: host\nnodes: {nodes}\nrun:\n  entrypoint: train.py\n"

ONE_RUN = """
import json, resource, subprocess, sys, time
began = time.perf_counter()
with open(sys.argv[2], "wb") as out:
    subprocess.run([sys.executable, "-m", "launcher", "submit", sys.argv[1], "--dry-run"],
                   stdout=out, check=True)
seconds = time.perf_counter() - began
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_mb": peak_kib / 1024}))
"""


def one_run(folder: Path, nodes: int, repo: Path) -> dict[str, float]:
    spec = folder / f"job-{nodes}.yaml"
    spec.write_text(SPEC.format(nodes=nodes))
    (folder / "train.py").write_text("print('hi')\n")
    out = folder / f"plan-{nodes}.txt"
    env = dict(os.environ, PYTHONPATH=str(repo), GPUJOB_STATE_DIR=str(folder / "state"),
               GPUJOB_CACHE_DIR=str(folder / "cache"))  # fmt: skip
    done = subprocess.run([sys.executable, "-c", ONE_RUN, str(spec), str(out)], env=env,
                          cwd=folder, capture_output=True, text=True, check=True)  # fmt: skip
    result = json.loads(done.stdout)
    with out.open("rb") as plan:
        result["lines"] = sum(1 for _ in plan)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in NODES:
            runs = [one_run(Path(tmp), nodes, args.repo) for _ in range(args.runs)]
            rows[nodes] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    base = rows[NODES[0]]
    print(f"repo {args.repo}, median of {args.runs} run(s) each\n")
    print("| nodes | time | peak RSS | plan lines | time per node over 10 | RSS per node over 10 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for nodes, row in rows.items():
        added = nodes - NODES[0]
        per_time = f"{(row['seconds'] - base['seconds']) / added * 1000:.2f} ms" if added else "-"
        per_rss = f"{(row['peak_mb'] - base['peak_mb']) / added * 1024:.1f} KiB" if added else "-"
        print(f"| {nodes} | {row['seconds']:.2f} s | {row['peak_mb']:.0f} MB | "
              f"{row['lines']:.0f} | {per_time} | {per_rss} |")  # fmt: skip


if __name__ == "__main__":
    main()
