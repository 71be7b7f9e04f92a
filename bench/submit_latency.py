"""Time from `gpujob submit` to the job's first log line on a ready lab host, against raw
`ssh host docker run IMAGE echo` in the same run (issues 8 and 15: ratio under 1.5).

The job's first log line is the one its run script prints in the container just before it
execs torchrun (the same event as the baseline's `echo`: the container runs and speaks).
The program's own first line comes after torchrun has imported torch; that time is shown
too, beside a second baseline doing the same work over raw ssh + docker (torchrun starting
a one-line program). All alternate, round by round, on one host that already has the
image. gpujob's connection to the host stays open between its commands (OpenSSH's
ControlPersist), as it does for a user; each round also times a submit that has to open
the connection (the baseline opens one every time). `--delay-ms 25` puts the host 50 ms away (round
trip) behind a delaying proxy, for both.
Usage (root, lab up): .venv/bin/python bench/submit_latency.py [--delay-ms 25]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from labhost import GPUJOB, BenchHost, bench_host, write_job

from launcher.remote.openssh import stop_masters

PROGRAM = "print('first line', flush=True)\n"


def first_line_s(
    argv: list[str], env: dict[str, str] | None = None, program: bytes | None = None
) -> tuple[float, float]:
    """Seconds from start until the process prints its first line to stdout, and until it
    prints a line holding `program` (the program's own first line)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    first_s = time.perf_counter() - start
    line = first
    while program is not None and line and program not in line:
        line = proc.stdout.readline()
    program_s = time.perf_counter() - start
    proc.communicate()
    if not first or (program is not None and not line):
        raise SystemExit(f"no output from {argv[:3]}... (exit {proc.returncode})")
    return first_s, program_s


@contextmanager
def _maybe_far(host: BenchHost, one_way_ms: float) -> Iterator[BenchHost]:
    if not one_way_ms:
        yield host
        return
    with host.far_away(one_way_ms) as far:
        print(f"the host is {2 * one_way_ms:g} ms away (round trip) through a delaying proxy")
        yield far


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay to the host")
    args = parser.parse_args()
    rounds = args.rounds
    with bench_host() as near, _maybe_far(near, args.delay_ms) as host:
        spec = write_job(host.folder, PROGRAM)
        gpujob = [GPUJOB, "submit", str(spec), "--on", "bench"]
        echo = host.ssh(f"docker run --rm {host.image} echo first line")
        torchrun = host.ssh(
            f"docker run --rm --init --network host {host.image} bash -c "
            "\"echo 'print(1, flush=True)' > /tmp/p.py && exec python -m "
            'torch.distributed.run --standalone --nproc-per-node 1 /tmp/p.py"'
        )
        first_line_s(gpujob, host.env)  # first contact pins the key and ships the workdir
        state = Path(host.env["GPUJOB_STATE_DIR"])
        results: dict[str, list[float]] = {
            "gpujob": [], "program": [], "cold": [], "echo": [], "torchrun": []
        }  # fmt: skip
        for _ in range(rounds):
            results["echo"].append(first_line_s(echo)[0])
            first, program = first_line_s(gpujob, host.env, b"first line")
            results["gpujob"].append(first)
            results["program"].append(program)
            stop_masters(state)  # the next submit opens the connection itself
            results["cold"].append(first_line_s(gpujob, host.env)[0])
            results["torchrun"].append(first_line_s(torchrun)[0])
    med = {key: statistics.median(values) for key, values in results.items()}
    names = {"gpujob": "gpujob submit, the job's first line", "program": "gpujob submit, "
             "the program's first line", "cold": "gpujob submit, first line, no connection yet",
             "echo": "ssh host docker run IMAGE echo",
             "torchrun": "ssh host docker run IMAGE torchrun one-line.py"}  # fmt: skip
    for key, values in results.items():
        print(
            f"{names[key]:48s} median {med[key]:.2f} s  ({', '.join(f'{v:.2f}' for v in values)})"
        )
    print(f"ratio first line / ssh docker run echo:       {med['gpujob'] / med['echo']:.2f}")
    print(f"  the same, no connection open yet:           {med['cold'] / med['echo']:.2f}")
    print(f"ratio program line / ssh docker run torchrun: {med['program'] / med['torchrun']:.2f}")


if __name__ == "__main__":
    main()
