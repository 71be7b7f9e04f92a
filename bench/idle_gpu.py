"""The GPU-idle policy on a GPU machine: how long after a job's GPU goes idle does the agent
decide to stop it, against the configured window (the ratio should stay near 1: one
sampling interval and nvidia-smi's own averaging late at most), and what one sample costs
(`nvidia-smi --query-gpu=...`, the agent's call) against a bare `nvidia-smi` in the same run.

    python3 bench/idle_gpu.py [--rounds 2] [--minutes 0.25] [--samples 15]

The job works on the GPU for a few seconds (so the idle stretch starts when it says so, not
at its start), prints the wall time, then holds its memory and sleeps; `action: stop`.
Under 2 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launcher.agent.limits import QUERY, IdlePolicy, query_gpus

REPO = Path(__file__).resolve().parents[1]
WORK_THEN_IDLE = """\
import sys, time
import torch

a = torch.randn(4096, 4096, device="cuda")
until = time.monotonic() + {work_s}
while time.monotonic() < until:
    for _ in range(20):
        a = torch.tanh(a @ a)
    torch.cuda.synchronize()
sys.stdout.write(f"idle from {{time.time():.3f}}\\n"); sys.stdout.flush()
time.sleep(3600)
"""


def sample_costs(samples: int) -> tuple[float, float]:
    """Median ms of the agent's query and of a bare `nvidia-smi`, alternated call by call."""
    ours, bare = [], []
    for _ in range(samples):
        began = time.perf_counter()
        query_gpus()
        ours.append(time.perf_counter() - began)
        began = time.perf_counter()
        subprocess.run(["nvidia-smi"], capture_output=True, check=True)
        bare.append(time.perf_counter() - began)
    return statistics.median(ours) * 1000, statistics.median(bare) * 1000


def one_round(folder: Path, round_no: int, minutes: float, work_s: float) -> tuple[float, float]:
    """Seconds from the job's own `idle from` to the agent's stop decision, and to its end."""
    work = folder / f"work-{round_no}"
    work.mkdir()
    (work / "idle.py").write_text(WORK_THEN_IDLE.format(work_s=work_s))
    spec = folder / f"idle-{round_no}.yaml"
    spec.write_text(
        f"name: idle\nimage: host\nworkdir: {work.name}\n"
        "resources:\n  accelerators: 'H100:1'\n"
        f"  idle_gpu: {{below_percent: 5, minutes: {minutes}, action: stop}}\n"
        "run:\n  entrypoint: idle.py\n  nproc_per_node: 1\n"
    )
    env = dict(os.environ, GPUJOB_STATE_DIR=str(folder / "state"))
    job_id = f"idle-bench-{round_no}"
    started = subprocess.run(
        [sys.executable, "-m", "launcher", "submit", str(spec), "--job-id", job_id, "--detach"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if started.returncode != 0:
        raise SystemExit(f"submit failed: {started.stderr[-2000:]}")
    node = folder / "state" / "jobs" / job_id / "node-0"
    decided = None
    deadline = time.monotonic() + work_s + minutes * 60 + 90
    while time.monotonic() < deadline:
        status = _json(node / "status.json")
        if decided is None and status.get("stopped_reason"):
            decided = time.time()
        if status.get("state") not in (None, "starting", "running"):
            break
        time.sleep(0.05)
    else:
        raise SystemExit(f"the job did not end in time; its log: {node / 'job.log'}")
    log = (node / "job.log").read_text()
    idle_from = re.search(r"^idle from ([0-9.]+)$", log, re.M)
    if idle_from is None or decided is None:
        raise SystemExit(f"no idle start or no stop decision; the log:\n{log[-3000:]}")
    began = float(idle_from.group(1))
    return decided - began, float(status["ended_at"]) - began


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=0.25, help="The policy's window.")
    parser.add_argument("--work-s", type=float, default=8.0, help="GPU work before idling.")
    parser.add_argument("--samples", type=int, default=15)
    args = parser.parse_args()
    policy = IdlePolicy(5, args.minutes, "stop")
    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)
    print(f"machine: {platform.node()}; {len(gpus.stdout.splitlines())} GPU(s): "
          f"{gpus.stdout.splitlines()[0] if gpus.stdout else '?'}")  # fmt: skip
    ours, bare = sample_costs(args.samples)
    print(f"one sample `{' '.join(QUERY)}`: median {ours:.1f} ms; bare `nvidia-smi`: "
          f"{bare:.1f} ms (ratio {ours / bare:.2f}); one every {policy.sample_every_s:g} s "
          f"keeps the agent's watch thread waiting {100 * ours / 1000 / policy.sample_every_s:.2f}%"
          " of the time")  # fmt: skip
    decided, ended = [], []
    with tempfile.TemporaryDirectory(prefix="gpujob-idle-bench-") as folder:
        for round_no in range(args.rounds):
            to_decide, to_end = one_round(Path(folder), round_no, args.minutes, args.work_s)
            decided.append(to_decide)
            ended.append(to_end)
            print(f"round {round_no}: idle -> stop decided after {to_decide:.2f} s "
                  f"({to_decide / policy.window_s:.3f}x the window), job ended after "
                  f"{to_end:.2f} s")  # fmt: skip
    window = policy.window_s
    decision, end = statistics.median(decided), statistics.median(ended)
    print(f"window {window:g} s (under 5%), sampled every {policy.sample_every_s:g} s; median "
          f"decision {decision:.2f} s = {decision / window:.3f}x the window; median end "
          f"{end:.2f} s = {end / window:.3f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
