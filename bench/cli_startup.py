"""CLI start-up: `gpujob --help` and `gpujob status` against `python -c pass` of the same venv
(issue 15 targets: `--help` under 3x, `status` under 4x).

Runs are interleaved (baseline, help, status, baseline, ...) so load on the machine hits all
three alike; medians of N runs; ratios printed. Also lists which heavy modules each command
imported, which must be none (click alone is allowed).

    .venv/bin/python bench/cli_startup.py [--runs 9] [--jobs 10000]

`--jobs N` first records N ended jobs in the bench's state (through the state db's own
`add_job`), so `status` is measured over a long history (issue 32: 10,000 jobs, under 4x).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("paramiko", "boto3", "docker", "jinja2", "pydantic", "rich", "torch", "yaml")


def timed(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def heavy_imports(python: str, args: list[str], env: dict[str, str]) -> list[str]:
    code = (
        "import sys; from launcher.cli import main\n"
        f"try: main({args!r})\n"
        "except SystemExit: pass\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=True)
    return proc.stderr.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--jobs", type=int, default=0, help="ended jobs recorded first")
    parser.add_argument(
        "--before",
        metavar="TREE",
        help="also time `status` of this checkout "
        "(PYTHONPATH=TREE), interleaved: before and after a change",
    )
    args = parser.parse_args()
    state = tempfile.mkdtemp(prefix="gpujob-bench-")
    try:
        measure(args, state)
    finally:  # the state's SSH control folder, then the folder: nothing left in /tmp
        from launcher.remote.openssh import close_state

        close_state(Path(state))
        shutil.rmtree(state, ignore_errors=True)


def measure(args: argparse.Namespace, state: str) -> None:
    python = sys.executable
    gpujob = str(Path(python).with_name("gpujob"))
    env = dict(os.environ, GPUJOB_STATE_DIR=state)
    if args.jobs:
        record_history(Path(env["GPUJOB_STATE_DIR"]), args.jobs)
        print(f"state: {args.jobs} ended jobs recorded")
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "gpujob --help": [gpujob, "--help"],
        "gpujob status": [gpujob, "status"],
    }
    envs = {name: env for name in commands}
    if args.before:
        commands["gpujob status, before"] = [gpujob, "status"]
        envs["gpujob status, before"] = dict(env, PYTHONPATH=args.before)
    for name, argv in commands.items():
        timed(argv, envs[name])  # warm the page cache and .pyc files
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, argv in commands.items():
            times[name].append(timed(argv, envs[name]))
    base = statistics.median(times["python -c pass"])
    print(f"interpreter: {python} (the venv's, not the PATH shim); median of {args.runs} runs")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:22s} {median * 1000:7.1f} ms   {median / base:5.1f}x")
    for name, cli_args in (("--help", ["--help"]), ("status", ["status"])):
        found = heavy_imports(python, cli_args, env)
        print(f"heavy modules imported by gpujob {name}: {', '.join(found) or 'none'}")


def record_history(state: Path, count: int) -> None:
    """`count` ended local jobs, a second apart, as `submit` records them."""
    from launcher.state.db import JobRecord, StateDB

    db = StateDB(state / "state.db")
    began = time.time() - count
    for n in range(count):
        folder = str(state / "jobs" / f"hist-{n}")
        db.add_job(JobRecord(
            id=f"hist-{n:05d}", name="hist", spec_path="job.yaml", provider="local",
            runtime="bare", hosts=["local"], node_dirs=[folder], state="succeeded",
            exit_code=0, created_at=began + n, ended_at=began + n + 0.5, last_line="done",
        ))  # fmt: skip


if __name__ == "__main__":
    main()
