"""Does gpujob cost the training anything? Same script, same steps, through `gpujob submit`
and through bare `torchrun`, alternated in one run on one machine; tokens/s and the time from
launch to the first training step for each, and their ratio.

    python3 bench/gpu_overhead.py [--rounds 2] [--set profile=gpu ...]
"""

from __future__ import annotations

import argparse
import platform
import sys

from gpu_runs import median, through_gpujob, through_torchrun


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", default="jobs/quickstart.yaml")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=2)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
