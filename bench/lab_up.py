"""How long `gpujob lab up --hosts 2` takes once the base image is cached (target: under 60 s).

Cycles the machine's one lab: refuses to run while a lab is up, and takes it down at the end.
The first cycle builds the base image if it is missing and is reported but not counted.
Usage (root): .venv/bin/python bench/lab_up.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

GPUJOB = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "gpujob")


def cycle() -> tuple[float, float]:
    """One `lab up` and one `lab down`, each timed; a failure stops the bench with its stderr."""
    times = []
    for argv in (["lab", "up", "--hosts", "2"], ["lab", "down"]):
        start = time.monotonic()
        done = subprocess.run([GPUJOB, *argv], capture_output=True, text=True)
        times.append(time.monotonic() - start)
        if done.returncode != 0:
            sys.exit(f"gpujob {' '.join(argv)} failed:\n{done.stderr}")
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from infra.lab import state

    if state.alive(state.read_state()["daemons"].get("registry")):
        sys.exit("a lab is up; run `gpujob lab down` first (this bench cycles the lab)")
    first_up, first_down = cycle()
    print(f"first  up {first_up:6.1f} s  down {first_down:5.1f} s  (may build the base image)")
    ups, downs = [], []
    for _ in range(runs):
        up, down = cycle()
        ups.append(up)
        downs.append(down)
    print(
        f"cached up {statistics.median(ups):6.1f} s  down {statistics.median(downs):5.1f} s"
        f"  (median of {runs}; up runs {', '.join(f'{t:.1f}' for t in ups)})"
    )


if __name__ == "__main__":
    main()
