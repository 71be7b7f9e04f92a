"""DeepSpeed through gpujob against bare DeepSpeed, on one GPU machine: the same training
script (jobs/ds/train_ds.py, ZeRO-2) started by `deepspeed --num_gpus=N` by hand and by
`gpujob submit jobs/deepspeed.yaml --set profile=gpu` (launcher: deepspeed, local provider,
bare runtime), alternated round by round; the script's own steady tokens/s (after its
warm-up) compared. Target ratio gpujob / bare >= 0.98.

    python3 bench/deepspeed_launch.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEADY = re.compile(r"steady tokens/s (\d+)")


def spec_args() -> list[str]:
    """The gpu profile's args, read from the spec, so both runs train the same thing."""
    from launcher.spec.load import load_job_spec

    spec = load_job_spec(REPO / "jobs" / "deepspeed.yaml", ["profile=gpu"]).spec
    return [str(arg) for arg in spec.run.args]


def steady(output: str, what: str) -> float:
    found = STEADY.findall(output)
    if not found:
        raise SystemExit(f"{what}: no `steady tokens/s` line; its output ends:\n{output[-3000:]}")
    return float(found[-1])


def bare(gpus: int, args: list[str]) -> float:
    done = subprocess.run(
        [sys.executable, "-u", "-m", "deepspeed.launcher.runner", f"--num_gpus={gpus}",
         "--master_port=29511", "train_ds.py", *args],
        cwd=REPO / "jobs" / "ds", capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    return steady(done.stdout + done.stderr, "bare deepspeed")


def through_gpujob(state: Path) -> float:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(state))
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "submit", "jobs/deepspeed.yaml", "--set",
         "profile=gpu"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(
            f"gpujob exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return steady(done.stdout, "gpujob")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=1)
    options = parser.parse_args()
    args = spec_args()
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(options.rounds):
            first_bare = round_no % 2 == 0
            for kind in ("bare", "gpujob") if first_bare else ("gpujob", "bare"):
                if kind == "bare":
                    theirs.append(bare(options.gpus, args))
                else:
                    ours.append(through_gpujob(Path(tmp) / f"state-{round_no}"))
                print(
                    f"round {round_no + 1} {kind}: {(theirs if kind == 'bare' else ours)[-1]:.0f}"
                    " tokens/s",
                    flush=True,
                )
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"bare deepspeed: median {statistics.median(theirs):.0f} tokens/s {theirs}")
    print(f"gpujob (launcher: deepspeed): median {statistics.median(ours):.0f} tokens/s {ours}")
    print(f"ratio gpujob / bare: {ratio:.3f} (target >= 0.98)")


if __name__ == "__main__":
    main()
