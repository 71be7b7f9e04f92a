"""Recovery on the lab: time from a host's loss to the first training step on its
replacement, against the sum of the parts no recovery can skip, measured in the same run
(target: ratio under 1.3).

The quickstart with `recovery:` runs under `submit --up` on the Lambda fake (real lab hosts,
checkpoints in the lab's S3). Once checkpoint-20 is in S3 and the job is past it (paused
there by SIGSTOP, so the loss lands at a known step), the instance is terminated through the
cloud's API. Each line the controller writes to its log, and each line the follow prints,
is stamped as it appears. The unavoidable parts:
  boot       the fake's launch and boot wait, until SSH answers (launching -> bootstrapping)
  bootstrap  the fresh host made ready, image pull included (bootstrapping -> ready)
  pull       the checkpoint pulled from S3 onto the new head, verified (its own line)
  start      the job's own start: torchrun, imports, model, resume, first step
             (job started -> the first step line after `resumed from`)
The rest of the total is the controller's: noticing the loss, terminating, finding the
checkpoint, the checks before renting, placement and shipping the job.

Then a 2-node job loses node 1's instance twice in the same run, once recovered by
replacing only that node (node 0's host kept, its job stopped and restarted) and once by
renting both nodes again (GPUJOB_RECOVER_WHOLE=1, the anchors' way): the time from the
loss to the first step of the new world, partial against whole (target: at most 0.7).

Uses the lab that is up, or brings one up and takes it down at the end. Usage (root):
    .venv/bin/python bench/recovery.py [--rounds N] [--pairs N]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))  # the venv running the bench
EVENTS = {
    "recovering": rb"recovering \(attempt 2",
    "launching": rb": launching on lambda",
    "bootstrapping": rb": bootstrapping ",
    "ready": rb": ready at ",
    "pulled": rb"pulled checkpoint-\d+ \(step \d+\) onto \S+ in ([0-9.]+) s",
    "started": rb"node 0: job started",
}


class Stamped:
    """Lines of a growing byte stream (a pipe, a file), each with when it was first seen."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, bytes]] = []
        self.partial = b""
        self.lock = threading.Lock()

    def feed(self, data: bytes) -> None:
        now = time.monotonic()
        *whole, self.partial = (self.partial + data).split(b"\n")
        with self.lock:
            self.lines += [(now, line) for line in whole]

    def first(self, pattern: bytes, after: float = 0.0) -> tuple[float, re.Match[bytes]] | None:
        with self.lock:
            for at, line in self.lines:
                found = re.search(pattern, line)
                if at >= after and found:
                    return at, found
        return None

    def wait(self, pattern: bytes, after: float = 0.0, timeout: float = 900,
             proc: subprocess.Popen | None = None) -> float:  # fmt: skip
        deadline = time.monotonic() + timeout
        while (found := self.first(pattern, after)) is None:
            if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
                sys.exit(f"never saw {pattern!r}")
            time.sleep(0.02)
        return found[0]


def pump(pipe: object, into: Stamped) -> None:
    while chunk := os.read(pipe.fileno(), 65536):  # type: ignore[attr-defined]
        into.feed(chunk)


def tail(path: Path, into: Stamped, stop: threading.Event) -> None:
    """The controller's log, read as it grows (every 20 ms)."""
    offset = 0
    while not stop.is_set():
        if path.exists():
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
            offset += len(data)
            if data:
                into.feed(data)
        time.sleep(0.02)


def pause(job_id: str) -> None:
    mark = f"GPUJOB_JOB_ID={job_id}\0".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes():
                os.kill(int(pid), signal.SIGSTOP)
        except OSError:
            continue


def write_spec(scratch: Path, job_id: str, nodes: int = 1) -> Path:
    spec = scratch / f"{job_id}.yaml"
    spec.write_text(
        f"name: qs\nimage: lab-cpu\nworkdir: {REPO / 'jobs' / 'quickstart'}\nnodes: {nodes}\n"
        "resources: {cpus: 2, disk_gb: 1}\n"
        'run: {entrypoint: train.py, nproc_per_node: 2, args: ["--steps", "40", "--seq-len", '
        '"64", "--log-every", "1"]}\n'
        "batch: {global_batch: 16, micro_batch: 4}\nenvs: {OMP_NUM_THREADS: 1}\n"
        f"checkpoints: {{dir: checkpoints, every_steps: 20, sync_to: 'lab:runs/{job_id}'}}\n"
        "recovery: {max_restarts: 1}\n"
    )
    return spec


class Run:
    """`submit --up` of the job, its stdout and its controller's log stamped as they come."""

    def __init__(self, env: dict[str, str], spec: Path, job_id: str) -> None:
        self.out, self.log, self.stop = Stamped(), Stamped(), threading.Event()
        self.proc = subprocess.Popen([GPUJOB, "submit", str(spec), "--up", "a100", "--allow-cpu",
                                      "--job-id", job_id], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        log_file = Path(env["GPUJOB_STATE_DIR"]) / "recovery" / f"{job_id}.log"
        threads = [threading.Thread(target=pump, args=(self.proc.stdout, self.out), daemon=True),
                   threading.Thread(target=pump, args=(self.proc.stderr, Stamped()), daemon=True),
                   threading.Thread(target=tail, args=(log_file, self.log, self.stop),
                                    daemon=True)]  # fmt: skip
        for thread in threads:
            thread.start()

    def paused_at_checkpoint(self, job_id: str, bucket: str) -> None:
        """Past checkpoint-20, paused, and checkpoint-20 complete in S3: the loss lands there."""
        from infra.lab import s3

        self.out.wait(rb"step 23/40", proc=self.proc)
        pause(job_id)
        key = f"runs/{job_id}/{job_id}/checkpoint-20/.gpujob-complete"
        while not s3.client().list_objects_v2(Bucket=bucket, Prefix=key).get("Contents"):
            time.sleep(0.05)

    def resumed(self, lost: float) -> float:
        """When the first step after the resume was printed; the job must then succeed."""
        resumed = self.out.wait(rb"resumed from checkpoint-20", after=lost, proc=self.proc)
        first_step = self.out.wait(rb"step 21/40", after=resumed, proc=self.proc)
        code = self.proc.wait(timeout=600)
        self.stop.set()
        if code != 0:
            sys.exit(f"the recovered job failed ({code})")
        return first_step


def terminate(fake: object, instance_id: str) -> None:
    import requests

    from infra.fakes import LAMBDA_API_KEY

    requests.post(f"{fake.url}/instance-operations/terminate", timeout=10,  # type: ignore[attr-defined]
                  headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"},
                  json={"instance_ids": [instance_id]}).raise_for_status()  # fmt: skip


def one_round(env: dict[str, str], scratch: Path, fake: object, bucket: str, n: int) -> dict:
    job_id = f"bench-rec-{n}"
    run = Run(env, write_spec(scratch, job_id), job_id)
    run.paused_at_checkpoint(job_id, bucket)
    (instance,) = instances(env, job_id)
    lost = time.monotonic()
    terminate(fake, instance)
    first_step = run.resumed(lost)
    log = run.log
    at = {name: log.wait(pattern, after=lost) for name, pattern in EVENTS.items()}
    found = log.first(EVENTS["pulled"], after=lost)
    assert found is not None
    parts = {
        "boot": at["bootstrapping"] - at["launching"],
        "bootstrap": at["ready"] - at["bootstrapping"],
        "pull": float(found[1][1]),
        "start": first_step - at["started"],
    }
    return {"total": first_step - lost, "detect": at["recovering"] - lost, **parts,
            "unavoidable": sum(parts.values())}  # fmt: skip


def instances(env: dict[str, str], job_id: str) -> list[str]:
    """The job's instance ids by rank, from its record in the state db."""
    import contextlib
    import sqlite3

    db = Path(env["GPUJOB_STATE_DIR"]) / "state.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        (hosts,) = conn.execute("SELECT hosts FROM jobs WHERE id=?", (job_id,)).fetchone()
    return [json.loads(record)["instance"].split(":", 1)[1] for record in json.loads(hosts)]


def two_node_round(env: dict[str, str], scratch: Path, fake: object, bucket: str, n: int,
                   whole: bool) -> dict:  # fmt: skip
    """Node 1's instance terminated; only it rented again, or (`whole`) both nodes."""
    job_id = f"bench-rec2-{'whole' if whole else 'part'}-{n}"
    env = dict(env, GPUJOB_RECOVER_WHOLE="1" if whole else "0")
    run = Run(env, write_spec(scratch, job_id, nodes=2), job_id)
    run.paused_at_checkpoint(job_id, bucket)
    before = instances(env, job_id)
    launched = launches(fake)
    lost = time.monotonic()
    terminate(fake, before[1])
    first_step = run.resumed(lost)
    after = instances(env, job_id)
    if os.environ.get("BENCH_TRACE"):  # where the time goes: the controller's lines, stamped
        print(f"{job_id}: the controller's log from the loss (s after it)")
        for at, line in run.log.lines:
            if at >= lost:
                print(f"  {at - lost:6.2f}  {line.decode(errors='replace')[:150]}")
        print(f"  {first_step - lost:6.2f}  (first step of the new world)")
        print(f"{job_id}: the job's own output from the restart (s after the loss)")
        for at, line in run.out.lines:
            if at >= lost and at <= first_step + 0.5:
                print(f"  {at - lost:6.2f}  {line.decode(errors='replace')[:150]}")
    return {"total": first_step - lost, "launches": launches(fake) - launched,
            "kept": sum(a == b for a, b in zip(before, after, strict=True))}  # fmt: skip


def launches(fake: object) -> int:
    return sum(r["op"] == "launch" for r in fake.control.requests())  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="single-node rounds")
    parser.add_argument("--pairs", type=int, default=1,
                        help="2-node rounds, each a partial and a whole recovery")  # fmt: skip
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from infra.lab import naming

    with naming.session_lock().open("a") as lock:  # the lab tests': one user at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        run(args.rounds, args.pairs)


def run(rounds: int, pairs: int) -> None:
    sys.path.insert(0, str(REPO))
    import infra.lab
    from infra.fakes import LAMBDA_API_KEY, serve_lambda
    from infra.fakes.lab_backend import LabBackend
    from infra.lab import job_image, registry, s3, state

    started = not state.alive(state.read_state()["daemons"].get("registry"))
    infra.lab.up(hosts=0, report=lambda _: None)
    job_image.build(report=lambda _: None)
    scratch = Path(tempfile.mkdtemp(prefix="gpujob-bench-recovery-"))
    backend = LabBackend(scratch / "records.json")
    fake = serve_lambda(backend)
    bucket = s3.create_bucket()
    (scratch / "config.yaml").write_text(json.dumps({"remotes": {"lab": {
        "provider": "Other", "endpoint": s3.endpoint(), "bucket": bucket,
        "host_endpoint": s3.endpoint(for_hosts=True),
        "access_key_env": "GJ_LAB_KEY", "secret_key_env": "GJ_LAB_SECRET"}}}))  # fmt: skip
    env = dict(os.environ, GPUJOB_STATE_DIR=str(scratch / "state"),
               GPUJOB_CACHE_DIR=str(scratch / "cache"), GPUJOB_CONFIG_DIR=str(scratch),
               GPUJOB_HOSTS_FILE=str(scratch / "hosts.yaml"),
               GPUJOB_SSH_KEY=str(infra.lab.user_key()), GPUJOB_POLL_S="0.5",
               GPUJOB_LAMBDA_SSH_USER="root", LAMBDA_API_KEY=LAMBDA_API_KEY,
               GPUJOB_LAMBDA_API_URL=fake.url, GPUJOB_REGISTRY=registry.address(),
               GPUJOB_IMAGE_REPO="gpujob-lab/job", GJ_LAB_KEY=s3.ACCESS_KEY,
               GJ_LAB_SECRET=s3.SECRET_KEY)  # fmt: skip
    results, partial, whole = [], [], []
    try:
        for n in range(rounds):
            results.append(one_round(env, scratch, fake, bucket, n))
        for n in range(pairs):  # alternated, so a drift in the machine's load hits both
            for is_whole in (n % 2 == 1, n % 2 == 0):
                done = two_node_round(env, scratch, fake, bucket, n, is_whole)
                (whole if is_whole else partial).append(done)
    finally:
        subprocess.run([GPUJOB, "down", "--all"], env=env, capture_output=True)
        fake.stop()
        backend.close()
        if started:
            infra.lab.down(report=lambda _: None)
    for name in ("total", "detect", "boot", "bootstrap", "pull", "start", "unavoidable"):
        if not results:
            break
        values = [r[name] for r in results]
        print(f"{name:>11}: {statistics.median(values):6.2f} s  "
              f"(runs {', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip
    if results:
        ratio = statistics.median([r["total"] / r["unavoidable"] for r in results])
        print(f"ratio loss->first step / (boot + bootstrap + pull + start): {ratio:.2f}  "
              f"(target under 1.3; median of {rounds} round(s))")  # fmt: skip
    for name, done in (("2 nodes, node 1 replaced", partial), ("2 nodes, both re-rented", whole)):
        if done:
            totals = [r["total"] for r in done]
            print(
                f"{name}: loss->first step {statistics.median(totals):.2f} s (runs "
                f"{', '.join(f'{v:.2f}' for v in totals)}); launches after the loss "
                f"{[r['launches'] for r in done]}, instances kept {[r['kept'] for r in done]}"
            )
    if partial and whole:
        ratio = statistics.median([p["total"] / w["total"]
                                   for p, w in zip(partial, whole, strict=True)])  # fmt: skip
        print(f"ratio partial / whole re-rent, loss->first step of the new world: {ratio:.2f}  "
              f"(target at most 0.7; median of {pairs} pair(s))")  # fmt: skip


if __name__ == "__main__":
    main()
