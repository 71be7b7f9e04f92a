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

Uses the lab that is up, or brings one up and takes it down at the end. Usage (root):
    .venv/bin/python bench/recovery.py [--rounds N]
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
GPUJOB = str(REPO / ".venv" / "bin" / "gpujob")
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

    def wait(self, pattern: bytes, after: float = 0.0, timeout: float = 900) -> float:
        deadline = time.monotonic() + timeout
        while (found := self.first(pattern, after)) is None:
            if time.monotonic() > deadline:
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


def one_round(env: dict[str, str], scratch: Path, fake: object, bucket: str, n: int) -> dict:
    import requests

    from infra.fakes import LAMBDA_API_KEY
    from infra.lab import s3

    job_id = f"bench-rec-{n}"
    spec = scratch / f"qs-{n}.yaml"
    spec.write_text(
        f"name: qs\nimage: lab-cpu\nworkdir: {REPO / 'jobs' / 'quickstart'}\n"
        "resources: {cpus: 2, disk_gb: 1}\n"
        'run: {entrypoint: train.py, nproc_per_node: 2, args: ["--steps", "40", "--seq-len", '
        '"64", "--log-every", "1"]}\n'
        "batch: {global_batch: 16, micro_batch: 4}\nenvs: {OMP_NUM_THREADS: 1}\n"
        f"checkpoints: {{dir: checkpoints, every_steps: 20, sync_to: 'lab:runs/{job_id}'}}\n"
        "recovery: {max_restarts: 1}\n"
    )
    out, log = Stamped(), Stamped()
    submit = subprocess.Popen([GPUJOB, "submit", str(spec), "--up", "a100", "--allow-cpu",
                               "--job-id", job_id], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    stop = threading.Event()
    log_file = Path(env["GPUJOB_STATE_DIR"]) / "recovery" / f"{job_id}.log"
    threads = [threading.Thread(target=pump, args=(submit.stdout, out), daemon=True),
               threading.Thread(target=pump, args=(submit.stderr, Stamped()), daemon=True),
               threading.Thread(target=tail, args=(log_file, log, stop), daemon=True)]  # fmt: skip
    for thread in threads:
        thread.start()
    out.wait(rb"step 23/40")
    pause(job_id)
    key = f"runs/{job_id}/checkpoint-20/.gpujob-complete"
    while not s3.client().list_objects_v2(Bucket=bucket, Prefix=key).get("Contents"):
        time.sleep(0.05)
    auth = {"Authorization": f"Bearer {LAMBDA_API_KEY}"}
    url = fake.url  # type: ignore[attr-defined]
    (inst,) = [i for i in requests.get(f"{url}/instances", headers=auth, timeout=10).json()["data"]
               if i["status"] == "active"]  # fmt: skip
    lost = time.monotonic()
    requests.post(f"{url}/instance-operations/terminate", headers=auth, timeout=10,
                  json={"instance_ids": [inst["id"]]}).raise_for_status()  # fmt: skip
    resumed = out.wait(rb"resumed from checkpoint-20", after=lost)
    first_step = out.wait(rb"step 21/40", after=resumed)
    code = submit.wait(timeout=600)
    stop.set()
    if code != 0:
        sys.exit(f"the recovered job failed ({code})")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    rounds = parser.parse_args().rounds
    sys.path.insert(0, str(REPO))
    from infra.lab import naming

    with naming.session_lock().open("a") as lock:  # the lab tests': one user at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        run(rounds)


def run(rounds: int) -> None:
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
    results = []
    try:
        for n in range(rounds):
            results.append(one_round(env, scratch, fake, bucket, n))
    finally:
        subprocess.run([GPUJOB, "down", "--all"], env=env, capture_output=True)
        fake.stop()
        backend.close()
        if started:
            infra.lab.down(report=lambda _: None)
    for name in ("total", "detect", "boot", "bootstrap", "pull", "start", "unavoidable"):
        values = [r[name] for r in results]
        print(f"{name:>11}: {statistics.median(values):6.2f} s  "
              f"(runs {', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip
    ratios = [r["total"] / r["unavoidable"] for r in results]
    ratio = statistics.median(ratios)
    print(f"ratio loss->first step / (boot + bootstrap + pull + start): {ratio:.2f}  "
          f"(target under 1.3; median of {rounds} round(s))")  # fmt: skip


if __name__ == "__main__":
    main()
