"""Time from `gpujob submit --on slurm:lab` to the job's first log line on the terminal,
against raw `sbatch --wrap 'echo first'` over SSH to its output file having content, on the
same idle lab SLURM cluster in the same run (target: ratio of medians under 1.5).

Both go through the login host's sshd; both wait for the same scheduler tick. The gpujob
job is one node, `image: host`, a shell block that echoes one line; the SLURM queue is
empty before each round. Starts the lab cluster if it is not up (and stops it after).
Usage (root): .venv/bin/python bench/slurm_submit.py [--rounds N]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPUJOB = str(REPO / ".venv" / "bin" / "gpujob")


def login_ssh(cluster, command: str) -> subprocess.CompletedProcess:
    from infra.lab import known_hosts_path, user_key

    argv = ["ssh", "-i", str(user_key()), "-o", f"UserKnownHostsFile={known_hosts_path()}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
            f"root@{cluster.login.address}", command]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def idle(cluster) -> None:
    """The queue empty and every node `idle` again (a node still completing the last job
    makes the next one wait for the scheduler's next pass, whoever submits it)."""
    deadline = time.monotonic() + 60
    check = "squeue -h; sinfo -h -N -o %T | grep -vx idle"
    while login_ssh(cluster, check).stdout.strip():
        if time.monotonic() > deadline:
            sys.exit("the SLURM queue did not empty in 60 s")
        time.sleep(0.1)


def raw_sbatch(cluster, folder: Path, index: int) -> float:
    """`sbatch --wrap` over SSH, then the output file (on the shared folder) polled here."""
    out = folder / f"raw-{index}.out"
    start = time.monotonic()
    done = login_ssh(cluster, f"sbatch --parsable --chdir={folder} --output={out} "
                              "--wrap 'echo first'")  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"sbatch failed: {done.stderr}")
    deadline = start + 120
    while not (out.exists() and out.stat().st_size):
        if time.monotonic() > deadline:
            sys.exit(f"raw sbatch job {done.stdout.strip()}: no output in {out} after 120 s")
        time.sleep(0.005)
    return time.monotonic() - start


def gpujob_submit(spec: Path, env: dict[str, str]) -> float:
    """The CLI as a user runs it, until the job's first line reaches its stdout."""
    start = time.monotonic()
    proc = subprocess.Popen([GPUJOB, "submit", str(spec), "--on", "slurm:lab"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    took = time.monotonic() - start
    if not ready or not os.read(proc.stdout.fileno(), 4096):
        proc.kill()
        sys.exit(f"no log line from gpujob submit: {proc.communicate()[1].decode()[-2000:]}")
    _, err = proc.communicate(timeout=120)
    if proc.returncode != 0:
        sys.exit(f"gpujob submit failed ({proc.returncode}): {err.decode()[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    sys.path.insert(0, str(REPO))
    from infra.lab import naming, slurm, user_key

    with naming.session_lock().open("a") as lock:  # the lab tests': one user at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = slurm.cluster() is None
        cluster = slurm.up()
        try:
            run(cluster, rounds, user_key())
        finally:
            if started:
                slurm.down()


def run(cluster, rounds: int, key: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        (here / "work").mkdir()
        spec = here / "job.yaml"
        spec.write_text("name: bench\nimage: host\nworkdir: work\n"
                        "run:\n  shell: echo first\n")  # fmt: skip
        hosts = here / "hosts.yaml"
        hosts.write_text(f"hosts:\n  - {{name: lab, type: slurm, address: {cluster.login.address},"
                         f" user: root, key: {key}, shared: {cluster.shared}, partition: debug,"
                         " account: lab}\n")  # fmt: skip
        env = dict(os.environ, GPUJOB_STATE_DIR=str(here / "state"),
                   GPUJOB_HOSTS_FILE=str(hosts))  # fmt: skip
        folder = Path(cluster.shared) / "bench-raw"
        folder.mkdir(exist_ok=True)
        idle(cluster)
        gpujob_submit(spec, env)  # the first contact pins the login's key: not counted
        raws, ours = [], []
        for index in range(rounds):
            idle(cluster)
            raws.append(raw_sbatch(cluster, folder, index))
            idle(cluster)
            ours.append(gpujob_submit(spec, env))
        raw, own = statistics.median(raws), statistics.median(ours)
        print(
            f"raw sbatch --wrap to output   {raw:5.2f} s  (median of {rounds}: "
            f"{', '.join(f'{t:.2f}' for t in raws)})"
        )
        print(
            f"gpujob submit to first line   {own:5.2f} s  (median of {rounds}: "
            f"{', '.join(f'{t:.2f}' for t in ours)})"
        )
        print(f"ratio {own / raw:.2f} (target under 1.5)")


if __name__ == "__main__":
    main()
