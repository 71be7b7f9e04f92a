"""Does gpujob cost the training anything? Same script, same steps, through `gpujob submit`
and through bare `torchrun`, alternated in one run on one machine; tokens/s and the time from
launch to the first training step for each, and their ratio.

    python3 bench/gpu_overhead.py [--rounds 2] [--set profile=gpu ...] [--metrics-out DIR]

The agent records metrics in every gpujob run (its GPU samples and the job's own figures), so
the ratio is with metrics on. `--metrics-out DIR`: the last gpujob run's record there, its GPU
utilisation summed up, and its curves drawn (metrics.png) where matplotlib is installed.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
from pathlib import Path

from gpu_runs import median, through_gpujob, through_torchrun


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", default="jobs/quickstart.yaml")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--metrics-out", type=Path, help="Keep the last gpujob run's metrics here.")
    args = parser.parse_args()
    sets = args.sets or ["profile=gpu"]
    results = {"gpujob submit": [], "bare torchrun": []}
    for round_no in range(args.rounds):
        for result in (
            through_gpujob(args.spec, sets, f"overhead-{round_no}"),
            through_torchrun(args.spec, sets),
        ):
            if result.exit_code != 0 or result.steady_tokens_per_s is None:
                sys.stdout.write(result.output.decode(errors="replace")[-3000:])
                print(f"{result.how} failed with exit code {result.exit_code}")
                return 1
            results[result.how].append(result)
            print(
                f"round {round_no}: {result.how:14s} steady tokens/s "
                f"{result.steady_tokens_per_s:10.0f}  first step after {result.first_step_s:.2f} s"
            )
    print(f"machine: {platform.node()}; spec {args.spec} {' '.join(sets)}; {args.rounds} rounds")
    tps = {how: median([r.steady_tokens_per_s for r in runs]) for how, runs in results.items()}
    first = {how: median([r.first_step_s for r in runs]) for how, runs in results.items()}
    for how in results:
        print(f"{how:14s} median steady tokens/s {tps[how]:10.0f}  first step {first[how]:.2f} s")
    print(f"ratio gpujob/torchrun tokens/s: {tps['gpujob submit'] / tps['bare torchrun']:.4f}")
    print(
        f"first step: gpujob {first['gpujob submit']:.2f} s vs torchrun "
        f"{first['bare torchrun']:.2f} s (+{first['gpujob submit'] - first['bare torchrun']:.2f} s)"
    )
    if args.metrics_out:
        keep_metrics(results["gpujob submit"][-1].job_dir, args.metrics_out)
    return 0


def keep_metrics(job_dir: Path | None, out: Path) -> None:
    """The run's metrics.jsonl in `out`, its GPU utilisation summed up, its curves drawn."""
    assert job_dir is not None
    out.mkdir(parents=True, exist_ok=True)
    record = shutil.copy(job_dir / "node-0" / "metrics.jsonl", out / "metrics.jsonl")
    lines = [json.loads(line) for line in Path(record).read_text().splitlines()]
    util = [sum(r["gpu_util"]) / len(r["gpu_util"]) for r in lines if r.get("gpu_util")]
    steps = sum(1 for r in lines if r["kind"] == "step")
    busy = f"mean {sum(util) / len(util):.0f}%, max {max(util):.0f}%" if util else "not sampled"
    print(f"metrics: {steps} steps, {len(util)} GPU samples, GPU utilisation {busy}")
    try:
        from launcher.commands.metrics import write_plot
        from launcher.errors import GpujobError
        from launcher.jobs.metrics import parse_record
    except ImportError as err:  # bench/ run without the repository on the path
        print(f"metrics: no plot ({err})")
        return
    try:
        print(write_plot(job_dir.name, [parse_record(0, "host", Path(record).read_text())],
                         out / "metrics.png"))  # fmt: skip
    except GpujobError as err:  # matplotlib is not installed there
        print(f"metrics: no plot ({err.one_line()})")


if __name__ == "__main__":
    sys.exit(main())
