"""Many nodes at the cost of one (issue 32): a job on 1, 2, 4, 8 and 16 lab hosts, from
`gpujob submit` to every node's first line, against 1 node in the same run (target: 16
nodes within 1.5x of 1); then `gpujob logs -f` of a finished 16-node job's logs against raw
`ssh HOST cat FILE` of the same 16 files, all 16 at once, in total throughput (target: at
least 0.8).

Each host is a lab host (its own network namespace and sshd, no dockerd), the job runs bare
with the host's own python3, one process a node (`run: |`, no image: no environment to
build, so the figure is gpujob's own per-node work: contact, facts, files, the start, the
log). Sizes alternate round by round; gpujob's connections stay open between commands
(OpenSSH's ControlPersist) as they do for a user, after a first submit to all 16 pinned the
keys and opened them. The bench works on a lab of its own name (`GPUJOB_LAB_NAME`, default
`gjscale`), under that lab's lock, and takes it down at the end (`gpujob lab down`).
Usage (root): .venv/bin/python bench/many_nodes.py [--rounds 3] [--log-lines 100000]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))  # the venv running the bench
SIZES = (1, 2, 4, 8, 16)
FIRST = b"first line from node "
LOG_PROGRAM = """import random, sys
rng = random.Random(int(sys.argv[2]))
out = sys.stdout.buffer
for i in range(int(sys.argv[1])):
    out.write(b"step %07d | loss %.4f | lr %.3e | grad_norm %.3f | tok/s %d\\n" % (
        i, rng.uniform(1, 4), rng.uniform(1e-5, 3e-4), rng.uniform(0, 2), rng.randint(9000, 60000)))
out.flush()
"""


def spec_file(folder: Path, nodes: int, run: str, name: str) -> Path:
    work = folder / "work"
    work.mkdir(exist_ok=True)
    (work / "logs.py").write_text(LOG_PROGRAM)
    spec = folder / f"{name}.yaml"
    body = "".join(f"  {line}\n" for line in run.splitlines())
    spec.write_text(f"name: {name}\nimage: host\nworkdir: work\nnodes: {nodes}\nrun: |\n{body}")
    return spec


def every_first_line_s(argv: list[str], env: dict[str, str], nodes: int) -> float:
    """Seconds from start until every node's first line has come through gpujob's stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    seen: set[bytes] = set()
    took = None
    for line in proc.stdout:
        at = line.find(FIRST)
        if at >= 0:
            seen.add(line[at + len(FIRST) :].strip())
            if len(seen) == nodes:
                took = time.perf_counter() - start
                break
    _, err = proc.communicate()
    if took is None or proc.returncode != 0:
        raise SystemExit(f"{nodes} node(s): saw {len(seen)} first lines, exit "
                         f"{proc.returncode}\n{err.decode()[-2000:]}")  # fmt: skip
    return took


def read_all_s(argvs: list[list[str]], env: dict[str, str] | None) -> tuple[float, int]:
    """Seconds from start until every process has ended, and the bytes they wrote, all
    started at once (16 `ssh cat`, or one `gpujob logs`)."""

    def drain(argv: list[str]) -> int:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        got = 0
        while chunk := proc.stdout.read1(1 << 20):
            got += len(chunk)
        if proc.wait() != 0:
            raise SystemExit(f"{argv[:3]}... exited {proc.returncode}")
        return got

    start = time.perf_counter()
    with ThreadPoolExecutor(len(argvs)) as pool:
        got = sum(pool.map(drain, argvs))
    return time.perf_counter() - start, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--log-lines", type=int, default=100_000, help="a node's, about 74 bytes each"
    )
    parser.add_argument("--log-rounds", type=int, default=3)
    options = parser.parse_args()
    os.environ.setdefault("GPUJOB_LAB_NAME", "gjscale")
    sys.path.insert(0, str(REPO))
    import infra.lab
    from infra.lab import boot, naming

    with naming.session_lock().open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder = Path(tempfile.mkdtemp(prefix="gjbench-many-"))
        try:
            run_bench(folder, options, infra.lab, boot)
        finally:
            from launcher.remote.openssh import stop_masters

            stop_masters(folder / "state")
            down = subprocess.run([GPUJOB, "lab", "down"], capture_output=True, text=True)
            print(f"gpujob lab down: exit {down.returncode}", file=sys.stderr)
            shutil.rmtree(folder, ignore_errors=True)


def run_bench(folder: Path, options: argparse.Namespace, lab, boot) -> None:
    from infra.lab import known_hosts_path

    names = [f"n{i}" for i in range(max(SIZES))]
    made = [lab.create_host(name) for name in names]
    key = lab.user_key()
    (folder / "hosts.yaml").write_text("hosts:\n" + "".join(
        f"  - {{name: {name}, address: {host.address}, user: root, key: {key}}}\n"
        for name, host in zip(names, made, strict=True)))  # fmt: skip
    env = dict(os.environ, GPUJOB_STATE_DIR=str(folder / "state"),
               GPUJOB_HOSTS_FILE=str(folder / "hosts.yaml"))  # fmt: skip
    specs = {n: spec_file(folder, n, 'echo "first line from node $GPUJOB_NODE_RANK"', f"many{n}")
             for n in SIZES}  # fmt: skip

    def submit(n: int) -> list[str]:
        return [GPUJOB, "submit", str(specs[n]), "--on", ",".join(names[:n])]

    def ssh(host, command: str) -> list[str]:  # host: an infra.lab LabHost
        return ["ssh", "-i", str(key), "-o", f"UserKnownHostsFile={known_hosts_path()}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                f"root@{host.address}", command]  # fmt: skip

    every_first_line_s(submit(16), env, 16)  # pins 16 keys, opens 16 connections
    times: dict[int, list[float]] = {n: [] for n in SIZES}
    raw: dict[int, list[float]] = {1: [], 16: []}
    for _ in range(options.rounds):
        for n in SIZES:
            times[n].append(every_first_line_s(submit(n), env, n))
            if n in raw:  # the machine's own floor: n fresh ssh connections at once
                raw[n].append(read_all_s([ssh(h, "echo first line") for h in made[:n]], None)[0])
    med = {n: statistics.median(values) for n, values in times.items()}
    for n in SIZES:
        runs = ", ".join(f"{v:.2f}" for v in times[n])
        print(f"submit to every node's first line, {n:2d} node(s): median {med[n]:.2f} s"
              f"  ({runs})  {med[n] / med[1]:.2f}x of 1")  # fmt: skip
    print(f"ratio 16 nodes / 1 node: {med[16] / med[1]:.2f} (target within 1.5)")
    floor = {n: statistics.median(values) for n, values in raw.items()}
    print(f"raw `ssh HOST echo` on 1 / 16 hosts at once: {floor[1]:.2f} s / {floor[16]:.2f} s,"
          f" ratio {floor[16] / floor[1]:.2f} (the hosts' sshd run here too)")  # fmt: skip

    logs = spec_file(folder, 16, f"python3 logs.py {options.log_lines} $GPUJOB_NODE_RANK", "logs")
    done = subprocess.run([*submit(16)[:2], str(logs), *submit(16)[3:], "--detach",
                           "--job-id", "logs16"], env=env, capture_output=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr.decode()[-2000:])
    subprocess.run([GPUJOB, "logs", "logs16", "-f"], env=env, capture_output=True)  # the end
    files = [boot.host_dir(host.name) / "root" / ".gpujob" / "jobs" / "logs16" / f"node-{rank}"
             / "job.log" for rank, host in enumerate(made)]  # fmt: skip
    size = sum(path.stat().st_size for path in files)
    cats = [ssh(host, f"cat /root/.gpujob/jobs/logs16/node-{rank}/job.log")
            for rank, host in enumerate(made)]  # fmt: skip
    follow = [[GPUJOB, "logs", "logs16", "-f"]]
    took: dict[str, list[float]] = {"ssh cat": [], "gpujob": []}
    for _ in range(options.log_rounds):
        for what, argvs, with_env in (("ssh cat", cats, None), ("gpujob", follow, env)):
            seconds, got = read_all_s(argvs, with_env)
            if got < size:  # gpujob's lines carry their node's mark: more, never fewer
                raise SystemExit(f"{what} read {got} bytes of {size}")
            took[what].append(seconds)
    mb = size / 1e6
    for what, values in took.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"16 nodes' logs ({mb:.0f} MB), {what:7s}: median {statistics.median(values):.2f} s"
              f" = {mb / statistics.median(values):.0f} MB/s  ({runs})")  # fmt: skip
    ratio = statistics.median(took["ssh cat"]) / statistics.median(took["gpujob"])
    print(f"ratio gpujob logs -f / parallel ssh cat throughput: {ratio:.2f} (target at least 0.8)")


if __name__ == "__main__":
    main()
