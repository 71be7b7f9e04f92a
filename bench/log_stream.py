"""Log streaming throughput: `gpujob logs JOB` of a finished job's log on a lab host, against
raw `ssh host cat` of the same file, in the same run (issue 8 target: at least 0.8).

The job writes a log of about 100 MB (2 million lines) inside its container; then the two
readers alternate, each piped to this process, which counts bytes and checks both got the
whole file. Usage (root, lab up): .venv/bin/python bench/log_stream.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from labhost import GPUJOB, bench_host, write_job

PROGRAM = """
import sys
line = ("x" * 40 + "\\n").encode()
out = sys.stdout.buffer
for i in range(2_000_000):
    out.write(b"%07d " % i + line)
out.flush()
"""


def read_all_s(argv: list[str], env: dict[str, str] | None, size: int) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    got = 0
    while chunk := proc.stdout.read1(1 << 20):
        got += len(chunk)
    proc.wait()
    elapsed = time.perf_counter() - start
    if got != size:
        raise SystemExit(f"{argv[:2]} read {got} bytes, the log has {size}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with bench_host() as host:
        spec = write_job(host.folder, PROGRAM, name="biglog")
        done = host.gpujob("submit", str(spec), "--on", "bench", "--detach", "--job-id", "big")
        if done.returncode != 0:
            raise SystemExit(done.stderr.decode())
        host.gpujob("logs", "big", "-f")  # waits for the end
        path = "/root/.gpujob/jobs/big/node-0/job.log"
        size = int(subprocess.run(host.ssh(f"stat -c %s {path}"), capture_output=True,
                                  text=True).stdout)  # fmt: skip
        gpujob = [GPUJOB, "logs", "big"]
        cat = host.ssh(f"cat {path}")
        times: dict[str, list[float]] = {"gpujob": [], "cat": []}
        for _ in range(rounds):
            times["cat"].append(read_all_s(cat, None, size))
            times["gpujob"].append(read_all_s(gpujob, host.env, size))
    mb = size / 1e6
    med = {key: statistics.median(values) for key, values in times.items()}
    for key, values in times.items():
        print(f"{key:7s} median {med[key]:.2f} s = {mb / med[key]:.0f} MB/s "
              f"({', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip
    print(f"log: {mb:.0f} MB; throughput ratio gpujob / ssh cat: {med['cat'] / med['gpujob']:.2f}")


if __name__ == "__main__":
    main()
