"""Log streaming throughput: `gpujob logs JOB` of a finished job's log on a lab host, against
raw `ssh host cat` of the same file, in the same run (issue 8 target: at least 0.8).

The job writes a training-like log inside its container (2 million lines of step, loss,
learning rate, gradient norm and throughput, random digits: about 150 MB, which zlib level 1
packs 3.5x, where the x-filled lines of earlier runs packed 19x); then the two
readers alternate, each piped to this process, which counts bytes and checks both got the
whole file. gpujob reads through its open connection to the host (OpenSSH's
ControlPersist) with AES-GCM first; `ssh cat` opens one each time with OpenSSH's default
cipher, and once more with AES-GCM.
Usage (root, lab up): .venv/bin/python bench/log_stream.py [--rounds 5] [--lines 2000000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from labhost import GPUJOB, bench_host, write_job

PROGRAM = """
import random, sys
rng = random.Random(0)
out = sys.stdout.buffer
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000):
    out.write(b"step %07d | loss %.4f | lr %.3e | grad_norm %.3f | tok/s %d\\n" % (
        i, rng.uniform(1, 4), rng.uniform(1e-5, 3e-4), rng.uniform(0, 2), rng.randint(9000, 60000)))
out.flush()
"""


def read_all_s(argv: list[str], env: dict[str, str] | None, size: int) -> tuple[float, float]:
    """(start to last byte, first byte to last byte). Only the first is reported: gpujob
    receives a read whole before writing it, so its first byte says nothing of its rate."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    got, first = 0, None
    while chunk := proc.stdout.read1(1 << 20):
        first = first or time.perf_counter()
        got += len(chunk)
    end = time.perf_counter()
    proc.wait()
    if got != size or first is None:
        raise SystemExit(f"{argv[:2]} read {got} bytes, the log has {size}")
    return end - start, end - first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=2_000_000, help="49 bytes each")
    options = parser.parse_args()
    rounds = options.rounds
    with bench_host() as host:
        spec = write_job(host.folder, PROGRAM, name="biglog", args=(str(options.lines),))
        done = host.gpujob("submit", str(spec), "--on", "bench", "--detach", "--job-id", "big")
        if done.returncode != 0:
            raise SystemExit(done.stderr.decode())
        host.gpujob("logs", "big", "-f")  # waits for the end
        path = "/root/.gpujob/jobs/big/node-0/job.log"
        size = int(subprocess.run(host.ssh(f"stat -c %s {path}"), capture_output=True,
                                  text=True).stdout)  # fmt: skip
        gpujob = [GPUJOB, "logs", "big"]
        cat = host.ssh(f"cat {path}")
        gcm = [cat[0], "-c", "aes128-gcm@openssh.com", *cat[1:]]  # gpujob's first cipher
        times: dict[str, list[tuple[float, float]]] = {"gpujob": [], "cat": [], "cat-gcm": []}
        for _ in range(rounds):
            times["cat"].append(read_all_s(cat, None, size))
            times["gpujob"].append(read_all_s(gpujob, host.env, size))
            times["cat-gcm"].append(read_all_s(gcm, None, size))
    mb = size / 1e6
    for index, what in ((0, "whole command"),):
        med = {key: statistics.median(v[index] for v in values) for key, values in times.items()}
        for key in times:
            print(f"{what}: {key:6s} median {med[key]:.2f} s = {mb / med[key]:.0f} MB/s")
        print(f"{what}: ratio gpujob / ssh cat {med['cat'] / med['gpujob']:.2f} ({mb:.0f} MB)")
        print(
            f"{what}: ratio gpujob / ssh -c aes128-gcm cat "
            f"{med['cat-gcm'] / med['gpujob']:.2f} (the same cipher as gpujob's)"
        )


if __name__ == "__main__":
    main()
