"""Time from `gpujob submit` to the job's first log line on a ready lab host, against raw
`ssh host docker run IMAGE echo` in the same run (issue 32: at most 1.2x with the connection
open, at most 1.5x with none open yet).

The job's first log line is the one its run script prints in the container just before it
execs torchrun (the same event as the baseline's `echo`: the container runs and speaks).
Each case has its own baseline: gpujob with its connection to the host open (OpenSSH's
ControlPersist, kept between its commands as it is for a user) against raw ssh through a
connection it also keeps open; gpujob with no connection open yet (its masters stopped
first) against raw ssh opening one. The program's own first line comes after torchrun has
imported torch; that time is shown too, beside a baseline doing the same work over raw ssh +
docker (torchrun starting a one-line program). All alternate, round by round, on one host
that already has the image. `--delay-ms 25` puts the host 50 ms away (round trip) behind a
delaying proxy, for all of them.
Usage (root, lab up): .venv/bin/python bench/submit_latency.py [--delay-ms 25] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
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
    CPU_AT_FIRST_LINE.append(cpu_s(proc.pid))
    line = first
    while program is not None and line and program not in line:
        line = proc.stdout.readline()
    program_s = time.perf_counter() - start
    proc.communicate()
    if not first or (program is not None and not line):
        raise SystemExit(f"no output from {argv[:3]}... (exit {proc.returncode})")
    return first_s, program_s


CPU_AT_FIRST_LINE: list[float] = []
"""The CPU seconds each timed process had used when its first line came (its own, not its
ssh children's): gpujob's work, which a loaded machine stretches into wall time."""


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


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
    parser.add_argument(
        "--before",
        metavar="TREE",
        help="also time the gpujob of this checkout "
        "(PYTHONPATH=TREE), alternated with this one: before and after a change",
    )
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
        control = state.parent / "raw-ssh.sock"  # the baseline's own kept connection
        echo_kept = host.ssh(f"docker run --rm {host.image} echo first line", control)
        first_line_s(echo_kept)  # opens it
        before = dict(host.env, PYTHONPATH=args.before) if args.before else None
        names = {**NAMES, **(BEFORE if before else {})}
        results: dict[str, list[float]] = {key: [] for key in names}
        cpu: dict[str, list[float]] = {"gpujob": [], "gpujob_before": []}
        try:
            for _ in range(rounds):
                results["echo_kept"].append(first_line_s(echo_kept)[0])
                first, program = first_line_s(gpujob, host.env, b"first line")
                cpu["gpujob"].append(CPU_AT_FIRST_LINE[-1])
                results["gpujob"].append(first)
                results["program"].append(program)
                if before:
                    results["gpujob_before"].append(first_line_s(gpujob, before)[0])
                    cpu["gpujob_before"].append(CPU_AT_FIRST_LINE[-1])
                results["echo"].append(first_line_s(echo)[0])
                stop_masters(state)  # the next submit opens the connection itself
                results["cold"].append(first_line_s(gpujob, host.env)[0])
                if before:
                    stop_masters(state)
                    results["cold_before"].append(first_line_s(gpujob, before)[0])
                results["torchrun"].append(first_line_s(torchrun)[0])
        finally:
            subprocess.run(["ssh", "-o", f"ControlPath={control}", "-O", "exit", "x"],
                           capture_output=True)  # fmt: skip
    med = {key: statistics.median(values) for key, values in results.items()}
    for key, values in results.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"{names[key]:56s} median {med[key]:.3f} s  ({shown})")
    print(f"ratio first line / ssh docker run echo, connection open: "
          f"{med['gpujob'] / med['echo_kept']:.2f}  (target 1.2)")  # fmt: skip
    print(f"ratio first line / ssh docker run echo, none open yet:   "
          f"{med['cold'] / med['echo']:.2f}  (target 1.5)")  # fmt: skip
    print(f"ratio program line / ssh docker run torchrun:            "
          f"{med['program'] / med['torchrun']:.2f}")  # fmt: skip
    for key, values in cpu.items():
        if values:
            print(f"CPU of {key} at its first line: median {statistics.median(values):.3f} s")
    if "cold_before" in med:
        print(f"before ({args.before}): connection open "
              f"{med['gpujob_before'] / med['echo_kept']:.2f}, none open yet "
              f"{med['cold_before'] / med['echo']:.2f}")  # fmt: skip


NAMES = {
    "gpujob": "gpujob submit, the job's first line (connection open)",
    "echo_kept": "ssh host docker run IMAGE echo (connection open)",
    "cold": "gpujob submit, first line, no connection open yet",
    "echo": "ssh host docker run IMAGE echo (a new connection)",
    "program": "gpujob submit, the program's first line",
    "torchrun": "ssh host docker run IMAGE torchrun one-line.py",
}
BEFORE = {
    "gpujob_before": "before: gpujob submit, first line (connection open)",
    "cold_before": "before: gpujob submit, first line, no connection yet",
}


if __name__ == "__main__":
    main()
