"""Time from `gpujob submit` to the job's first log line on a ready lab host, against raw
`ssh host docker run IMAGE echo` in the same run (issue 8 target: ratio under 1.5).

The two alternate, round by round, on one host that already has the image. A second
baseline does the same work gpujob's container does before its first line (torchrun, which
imports torch, starting a one-line program), so the overhead of gpujob itself can be read
apart from torchrun's start. Usage (root, lab up): .venv/bin/python bench/submit_latency.py
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from labhost import GPUJOB, bench_host, write_job

PROGRAM = "print('first line', flush=True)\n"


def first_line_s(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds from start until the process prints its first line to stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.communicate()
    if not line:
        raise SystemExit(f"no output from {argv[:3]}... (exit {proc.returncode})")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    with bench_host() as host:
        spec = write_job(host.folder, PROGRAM)
        gpujob = [GPUJOB, "submit", str(spec), "--on", "bench"]
        echo = host.ssh(f"docker run --rm {host.image} echo first line")
        torchrun = host.ssh(
            f"docker run --rm --init --network host {host.image} bash -c "
            "\"echo 'print(1, flush=True)' > /tmp/p.py && exec python -m "
            'torch.distributed.run --standalone --nproc-per-node 1 /tmp/p.py"'
        )
        first_line_s(gpujob, host.env)  # first contact pins the key and ships the workdir
        results: dict[str, list[float]] = {"gpujob": [], "echo": [], "torchrun": []}
        for _ in range(rounds):
            results["echo"].append(first_line_s(echo))
            results["gpujob"].append(first_line_s(gpujob, host.env))
            results["torchrun"].append(first_line_s(torchrun))
    med = {key: statistics.median(values) for key, values in results.items()}
    for key, values in results.items():
        print(f"{key:9s} median {med[key]:.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    print(f"ratio gpujob / ssh docker run echo:          {med['gpujob'] / med['echo']:.2f}")
    print(f"ratio gpujob / ssh docker run torchrun line: {med['gpujob'] / med['torchrun']:.2f}")


if __name__ == "__main__":
    main()
