"""Seed 001's start-up: ranks that each import transformers and JIT-compile an op, with and
without `serialize_init`; peak host memory of the job (sampled by the agent) and time from
submit to the first training step, side by side, plus the lines the lock printed.

    python3 bench/serialize_init.py [--ranks 2] [--set image=lab-cpu]
"""

from __future__ import annotations

import argparse
import sys

from gpu_runs import through_gpujob


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--memory-limit-gb", type=float, help="Also a run with this RLIMIT_AS.")
    args = parser.parse_args()
    variants = {"serialize_init: false": ["run.serialize_init=false"],
                "serialize_init: true": ["run.serialize_init=true"]}  # fmt: skip
    if args.memory_limit_gb:
        variants[f"false + memory_limit_gb {args.memory_limit_gb:g}"] = [
            "run.serialize_init=false", f"run.memory_limit_gb={args.memory_limit_gb}"]  # fmt: skip
    for label, extra in variants.items():
        job_id = "seed001-" + ("serial" if "true" in label else "parallel")
        if "memory" in label:
            job_id += "-limited"
        sets = [f"run.nproc_per_node={args.ranks}", *args.sets, *extra]
        result = through_gpujob("jobs/seed001.yaml", sets, job_id)
        text = result.output.decode(errors="replace")
        reached = text.count(f"/{args.ranks}: done")
        print(
            f"{label:34s} exit {result.exit_code}  peak host memory "
            f"{result.node_status()['peak_rss_bytes'] / 2**30:6.2f} GiB  first step "
            f"{result.first_step_s if result.first_step_s is not None else float('nan'):6.1f} s  "
            f"ranks done {reached}/{args.ranks}"
        )
        for line in text.splitlines():
            if "LOCK:" in line or "jit_ops built" in line:
                print(f"    {line}")
        if result.exit_code != 0:
            print("    last lines: " + " | ".join(text.splitlines()[-4:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
