"""`gpujob up a100 --count 4` against `--count 1` on the lab's Lambda fake (target: under
1.5x), both measured in one run, each followed by `gpujob down --all`.

Every host is rented, waited for and bootstrapped (`--allow-cpu`: lab hosts have no GPU), so
the ratio says how well the four launches, boots and bootstraps overlap. Uses the lab that
is up, or brings one up and takes it down at the end. Usage (root):
    .venv/bin/python bench/parallel_up.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))  # the venv running the bench


def timed(env: dict[str, str], *args: str) -> float:
    start = time.monotonic()
    done = subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True)
    took = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"gpujob {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds of 1 and 4")
    rounds = parser.parse_args().rounds
    sys.path.insert(0, str(REPO))
    import infra.lab
    from infra.fakes import LAMBDA_API_KEY, serve_lambda
    from infra.fakes.lab_backend import LabBackend
    from infra.lab import state

    started = not state.alive(state.read_state()["daemons"].get("registry"))
    infra.lab.up(hosts=0, report=lambda _: None)
    scratch = Path(tempfile.mkdtemp(prefix="gpujob-bench-up-"))
    backend = LabBackend(scratch / "records.json")
    fake = serve_lambda(backend)
    env = dict(os.environ, GPUJOB_STATE_DIR=str(scratch / "state"),
               GPUJOB_SSH_KEY=str(infra.lab.user_key()), GPUJOB_POLL_S="0.5",
               GPUJOB_LAMBDA_SSH_USER="root",
               LAMBDA_API_KEY=LAMBDA_API_KEY, GPUJOB_LAMBDA_API_URL=fake.url)  # fmt: skip
    times: dict[int, list[float]] = {1: [], 4: []}
    try:
        for _ in range(rounds):
            for count in (1, 4):
                times[count].append(timed(env, "up", "a100", "--count", str(count), "--yes",
                                          "--allow-cpu", "--timeout", "300"))  # fmt: skip
                timed(env, "down", "--all")
    finally:
        fake.stop()
        backend.close()
        if started:
            infra.lab.down(report=lambda _: None)
    one, four = statistics.median(times[1]), statistics.median(times[4])
    print(f"up --count 1: {one:5.1f} s  (runs {', '.join(f'{t:.1f}' for t in times[1])})")
    print(f"up --count 4: {four:5.1f} s  (runs {', '.join(f'{t:.1f}' for t in times[4])})")
    print(f"ratio 4/1: {four / one:.2f}  (target under 1.5; median of {rounds} rounds)")


if __name__ == "__main__":
    main()
