"""Recovery through the real CLI: `submit --up` of the quickstart with `recovery:` on a host
from the Lambda or Vast fake (real lab hosts behind them, checkpoints in the lab's S3). The
host is lost mid-job as a cloud loses it (terminated through the cloud's API, a container
destroyed, an instance that reports `exited`); the job finishes on a replacement, resumed
from the last synced checkpoint: every step after the resume point once, the last step the
one asked for, the same losses as before the loss (same data order), and no instance left.

The loss lands at a known point without a clock: once the log shows a few steps past the
first checkpoint, the job's own processes are paused (SIGSTOP, by pid, found by the job id
in their environment), the checkpoint's marker is awaited in S3, and then the host goes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import test_up_hosts as up_hosts
from labtools import GPUJOB, lab_processes, wait_until

from infra.fakes import LAMBDA_API_KEY, VAST_API_KEY, RunningFake
from infra.fakes.webhook import TOKEN, Webhook

pytestmark = pytest.mark.lab
# Both fakes over this module's `backend` (which builds the job image first), and what each
# cloud lists as live: the `up` tests' own.
clouds, live = up_hosts.clouds, up_hosts.live
REPO = Path(__file__).resolve().parents[2]
STEP = re.compile(rb"step (\d+)/(\d+) loss ([0-9.]+)")
MARKER = ".gpujob-complete"
STEPS = 30
"""A checkpoint every 10 steps: a loss at step 13 resumes from 10, one at 23 from 20."""


@pytest.fixture
def backend(lab: None, tmp_path: Path) -> Iterator[Any]:
    from infra.fakes.lab_backend import LabBackend
    from infra.lab import job_image

    job_image.build(report=lambda line: print(f"lab: {line}"))
    made = LabBackend(tmp_path / "records.json")
    yield made
    made.close()  # whatever a failed test left running


@pytest.fixture
def webhook(lab: None) -> Iterator[Webhook]:
    """On the lab's bridge: the hosts' agents and this machine's controller both reach it."""
    from infra.lab import naming

    hook = Webhook(naming.bridge_address())
    yield hook
    hook.close()


@pytest.fixture
def bucket(lab: None) -> str:
    from infra.lab import s3

    return s3.create_bucket()


@pytest.fixture
def env(clouds: dict[str, RunningFake], bucket: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A user's shell: the clouds' keys and URLs, the lab's S3 as remote `lab`, and the
    controller's knobs made short (poll, SSH window, retry wait)."""
    from infra.lab import registry, s3, user_key

    config = tmp_path / "config"
    config.mkdir()
    (config / "config.yaml").write_text(json.dumps({"remotes": {"lab": {
        "provider": "Other", "endpoint": s3.endpoint(), "bucket": bucket,
        "host_endpoint": s3.endpoint(for_hosts=True),
        "access_key_env": "GJ_LAB_KEY", "secret_key_env": "GJ_LAB_SECRET"}}}))  # fmt: skip
    made = {
        **os.environ,
        "GPUJOB_STATE_DIR": str(tmp_path / "state"),
        "GPUJOB_CACHE_DIR": str(tmp_path / "cache"),
        "GPUJOB_HOSTS_FILE": str(tmp_path / "hosts.yaml"),
        "GPUJOB_CONFIG_DIR": str(config),
        "GPUJOB_SSH_KEY": str(user_key()),
        "GPUJOB_POLL_S": "1",
        "GPUJOB_RETRY_BASE_S": "0.05",
        "GPUJOB_RECOVER_UNREACHABLE_S": "10",
        "GPUJOB_RECOVER_RETRY_S": "0.5",
        "GPUJOB_RECOVER_FOLLOW_PATIENCE_S": "3",
        "GPUJOB_LAMBDA_SSH_USER": "root",
        "LAMBDA_API_KEY": LAMBDA_API_KEY,
        "GPUJOB_LAMBDA_API_URL": clouds["lambda"].url,
        "VAST_API_KEY": VAST_API_KEY,
        "GPUJOB_VAST_API_URL": clouds["vast"].url,
        "GPUJOB_REGISTRY": registry.address(),
        "GPUJOB_IMAGE_REPO": "gpujob-lab/job",
        "GJ_LAB_KEY": s3.ACCESS_KEY,
        "GJ_LAB_SECRET": s3.SECRET_KEY,
    }
    yield made
    stop_controllers(made)
    subprocess.run([GPUJOB, "down", "--all"], env=made, capture_output=True, timeout=300)


def stop_controllers(env: dict[str, str]) -> None:
    """A failed test may leave a controller running: ended by its recorded pid."""
    import sqlite3

    db = Path(env["GPUJOB_STATE_DIR"]) / "state.db"
    if not db.exists():
        return
    with contextlib.closing(sqlite3.connect(db)) as conn:
        try:
            pids = [row[0] for row in conn.execute("SELECT pid FROM recoveries") if row[0]]
        except sqlite3.OperationalError:
            return
    for pid in pids:
        with contextlib.suppress(OSError):
            if b"recover" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)


def job_spec(tmp_path: Path, *, steps: int = STEPS, nodes: int = 1, restarts: int = 2,
             extra: str = "") -> str:  # fmt: skip
    spec = tmp_path / "qs.yaml"
    spec.write_text(
        f"name: qs\nimage: lab-cpu\nworkdir: {REPO / 'jobs' / 'quickstart'}\nnodes: {nodes}\n"
        "resources: {cpus: 2, disk_gb: 1}\n"
        "run: {entrypoint: train.py, nproc_per_node: 1, args: "
        f'["--steps", "{steps}", "--seq-len", "64", "--log-every", "1"]}}\n'
        "batch: {global_batch: 16, micro_batch: 4}\nenvs: {OMP_NUM_THREADS: 1}\n"
        "checkpoints: {dir: checkpoints, every_steps: 10, keep_last: 2, sync_to: 'lab:runs/qs'}\n"
        f"recovery: {{max_restarts: {restarts}}}\n{extra}"
    )
    return str(spec)


class Command:
    """The real `gpujob` in a subprocess; both of its streams drained as they come."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen([GPUJOB, *args], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        self.out, self.err = bytearray(), bytearray()
        self.drains = [threading.Thread(target=self._drain, args=(pipe, into), daemon=True)
                       for pipe, into in ((self.proc.stdout, self.out),
                                          (self.proc.stderr, self.err))]  # fmt: skip
        for drain in self.drains:
            drain.start()

    @staticmethod
    def _drain(pipe: Any, into: bytearray) -> None:
        while chunk := os.read(pipe.fileno(), 65536):
            into += chunk

    def wait_for(self, pattern: bytes, timeout: float = 600, stdout: bool = True) -> None:
        stream = self.out if stdout else self.err

        def seen() -> bool:
            return re.search(pattern, stream) is not None or self.proc.poll() is not None

        try:
            wait_until(seen, f"gpujob printing {pattern!r}", timeout)
        except AssertionError as never:  # what it printed instead, to tell a hung job apart
            raise AssertionError(f"{never}\n{self.text()}") from None
        assert re.search(pattern, stream), self.text()

    def finish(self, timeout: float = 900) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"gpujob did not exit:\n{self.text()}") from None
        for drain in self.drains:
            drain.join()
        return code

    def text(self) -> str:
        out, err = (bytes(b).decode(errors="replace") for b in (self.out, self.err))
        return f"--- stdout (end) ---\n{out[-4000:]}\n--- stderr (end) ---\n{err[-6000:]}"


def pause_job(job_id: str) -> list[int]:
    """SIGSTOP every process of the job on its host (found by GPUJOB_JOB_ID in their
    environment, among this session's lab processes: a test run beside this one runs a job
    of the same id on its own lab): the job stays where it is until its host goes."""
    mark = f"GPUJOB_JOB_ID={job_id}\0".encode()
    paused = []
    for pid in lab_processes():
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes():
                os.kill(pid, signal.SIGSTOP)
                paused.append(pid)
        except (OSError, ProcessLookupError):
            continue
    assert paused, f"no process of job {job_id} found"
    return paused


def synced(bucket: str, job_id: str, name: str) -> bool:
    """The checkpoint complete in the job's own run folder (`<sync_to>/<job id>/`)."""
    from infra.lab import s3

    key = f"runs/qs/{job_id}/{name}/{MARKER}"
    listed = s3.client().list_objects_v2(Bucket=bucket, Prefix=key)
    return bool(listed.get("Contents"))


def lose(fake: RunningFake, provider: str, how: str, instance_id: str) -> None:
    """The host goes as a cloud loses it, through the cloud's own API (or the fake's
    control for what only the cloud can do: an instance that reports `exited`)."""
    if how == "terminate":
        reply = requests.post(f"{fake.url}/instance-operations/terminate", timeout=10,
                              json={"instance_ids": [instance_id]},
                              headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"})  # fmt: skip
        reply.raise_for_status()
    elif how == "destroy":
        reply = requests.delete(f"{fake.url}/instances/{instance_id}/", timeout=10, json={},
                                headers={"Authorization": f"Bearer {VAST_API_KEY}"})  # fmt: skip
        reply.raise_for_status()
    else:
        fake.control.instance(instance_id, actual_status="exited")


def steps_of(text: bytes) -> list[tuple[int, int, str]]:
    return [(int(m[1]), int(m[2]), m[3].decode()) for m in STEP.finditer(text)]


def check_resumed(out: bytes, steps: int, *resumed_at: int) -> None:
    """After each resume point, every step once up to the next loss (or the last step asked
    for), and the losses of the steps two attempts both ran equal (the same data, state)."""
    text, attempts = bytes(out), []
    for step in resumed_at:
        before, marker, text = text.partition(
            f"resumed from checkpoint-{step} (step {step})".encode()
        )
        assert marker, bytes(out).decode(errors="replace")[-3000:]
        attempts.append(before)
    attempts.append(text)
    last = steps_of(attempts[-1])
    assert [s for s, _, _ in last] == list(range(resumed_at[-1] + 1, steps + 1)), last
    for earlier, later, step in zip(attempts, attempts[1:], resumed_at, strict=False):
        first = {s: loss for s, _, loss in steps_of(earlier)}
        second = steps_of(later)
        assert {total for _, total, _ in second} == {steps}
        ran = [s for s, _, _ in second]
        assert ran == list(range(step + 1, step + 1 + len(ran))), second
        # the steps both attempts ran have equal losses; there are none when the pause took
        # hold right at the checkpoint the job then resumed from (its log stops there)
        both = [s for s, _, _ in second if s in first]
        assert both or max(first, default=step) <= step, (sorted(first), step)
        assert [first[s] for s in both] == [loss for s, _, loss in second if s in first]


def no_secret_in_the_controller_log(env: dict[str, str], job_id: str) -> None:
    """The controller's log holds what it said, never a key it was given, nor a traceback."""
    text = (Path(env["GPUJOB_STATE_DIR"]) / "recovery" / f"{job_id}.log").read_text()
    assert "recovering (attempt 2" in text, text[-3000:]
    for name in ("LAMBDA_API_KEY", "VAST_API_KEY", "GJ_LAB_KEY", "GJ_LAB_SECRET"):
        assert env[name] not in text, name
    assert "Traceback" not in text, text[-3000:]


def job_row(env: dict[str, str], job_id: str) -> dict[str, Any]:
    done = subprocess.run([GPUJOB, "status", "--json"], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return next(row for row in json.loads(done.stdout)["jobs"] if row["id"] == job_id)


def lose_after(submit: Command, fake: RunningFake, bucket: str, job_id: str, provider: str,
               how: str, checkpoint: int) -> str:  # fmt: skip
    """Once the log is 3 steps past `checkpoint` (of this attempt), the job is paused, the
    checkpoint awaited in S3, and then its one host goes as `how` says: its instance id."""
    submit.wait_for(rf"step {checkpoint + 3}/{STEPS}".encode())
    pause_job(job_id)
    name = f"checkpoint-{checkpoint}"
    wait_until(lambda: synced(bucket, job_id, name), f"{name} in S3", every=0.5)
    (host,) = live(fake, provider)
    lose(fake, provider, how, str(host["id"]))
    return str(host["id"])


# Lambda: terminated through its API. Vast: the container destroyed and then, on the
# replacement, an instance that reports `exited` (preempted): two losses in one job.
LOSSES = {"lambda": [("terminate", "host_lost")],
          "vast": [("destroy", "host_lost"), ("exited", "preempted")]}  # fmt: skip


@pytest.mark.parametrize("provider", list(LOSSES))
def test_a_lost_host_is_replaced_and_the_job_resumes_from_the_last_synced_checkpoint(
    env: dict[str, str], clouds: dict[str, RunningFake], bucket: str, tmp_path: Path,
    provider: str, webhook: Webhook,
) -> None:  # fmt: skip
    """With `notify:`, the webhook gets one `recovered` per restart (from the controller)
    and one `succeeded` (from the replacement host's agent), each with the cost so far."""
    job_id = f"rec-{provider}"
    fake, losses = clouds[provider], LOSSES[provider]
    env = {**env, "GJ_HOOK_URL": webhook.url}
    notify = "notify: [{webhook_env: GJ_HOOK_URL, on: [failed, recovered, succeeded]}]\n"
    submit = Command(env, "submit", job_spec(tmp_path, extra=notify), "--up", "a100",
                     "--provider", provider, "--allow-cpu", "--job-id", job_id)  # fmt: skip
    resumed_at = []
    for n, (how, _) in enumerate(losses):
        checkpoint = 10 * (n + 1)
        if n:
            submit.wait_for(rf"resumed from checkpoint-{10 * n} \(step {10 * n}\)".encode())
        lose_after(submit, fake, bucket, job_id, provider, how, checkpoint)
        resumed_at.append(checkpoint)

    assert submit.finish() == 0, submit.text() + controller_log(env, job_id)
    err = bytes(submit.err).decode()
    for n, (_, why) in enumerate(losses, start=1):
        assert re.search(rf"recovering \(attempt {n + 1}, restart {n}/2, {why}: gpujob-\S+ "
                         rf".*from step {10 * n}\)", err), submit.text()  # fmt: skip
    assert "aborted" not in err and "Traceback" not in err, submit.text()
    # Once the controller has said it recovers, the follow stops retrying the old hosts.
    assert "trying again" not in err.partition("recovering (attempt 2")[2], submit.text()
    check_resumed(bytes(submit.out), STEPS, *resumed_at)
    assert live(fake, provider) == []
    row = job_row(env, job_id)
    assert (row["state"], row["exit_code"]) == ("succeeded", 0)
    assert row["recovery"]["phase"] == "finished"
    assert row["recovery"]["restarts"] == len(losses)
    no_secret_in_the_controller_log(env, job_id)
    told = [(job_id, "recovered")] * len(losses) + [(job_id, "succeeded")]
    wait_until(lambda: len(webhook.received) >= len(told), "the webhook's posts", 60)
    assert webhook.events() == told, webhook.received
    for post in webhook.received:
        assert re.search(r"cost so far: \$\d+\.\d\d", post["body"]["text"]), post
    for path in [p for p in Path(env["GPUJOB_STATE_DIR"]).rglob("*") if p.is_file()]:
        assert TOKEN.encode() not in path.read_bytes(), path


def test_max_restarts_used_up_stops_and_terminates_every_host(
    env: dict[str, str], clouds: dict[str, RunningFake], bucket: str, tmp_path: Path
) -> None:
    """`max_restarts: 1` and two losses: the first is recovered, the second stops the
    controller with the reason, no instance is left and the checkpoints stay in S3."""
    job_id = "rec-twice"
    fake = clouds["lambda"]
    submit = Command(env, "submit", job_spec(tmp_path, restarts=1), "--up", "a100",
                     "--allow-cpu", "--job-id", job_id)  # fmt: skip
    first = lose_after(submit, fake, bucket, job_id, "lambda", "terminate", 10)
    submit.wait_for(rb"resumed from checkpoint-\d+ \(step \d+\)")
    step = resumed_step(submit)  # 20 where the job got past it before the pause took hold
    (second,) = live(fake, "lambda")
    assert second["id"] != first
    lose(fake, "lambda", "terminate", second["id"])

    assert submit.finish() == 1, submit.text()
    last = bytes(submit.err).decode().strip().splitlines()
    stopped = next(line for line in last if "recovery stopped" in line)
    assert "max_restarts (1) used up: host_lost on node 0" in stopped, submit.text()
    assert "its checkpoints stay in S3" in stopped
    assert last[-1] == f"gpujob: job {job_id} failed (exit code 1)", submit.text()
    assert live(fake, "lambda") == []
    assert synced(bucket, job_id, f"checkpoint-{step}")
    row = job_row(env, job_id)
    assert (row["state"], row["recovery"]["phase"], row["recovery"]["restarts"]) == (
        "failed", "stopped", 1)  # fmt: skip


def test_capacity_gone_at_recovery_time_stops_after_bounded_tries(
    env: dict[str, str], clouds: dict[str, RunningFake], tmp_path: Path
) -> None:
    job_id = "rec-nocap"
    fake = clouds["lambda"]
    submit = Command(env, "submit", job_spec(tmp_path), "--up", "a100", "--allow-cpu",
                     "--job-id", job_id)  # fmt: skip
    submit.wait_for(rf"step 3/{STEPS}".encode())
    # Listed as available, refused at launch (the capacity a terminate frees included).
    fake.control.capacity(count=5, race=True)
    (first,) = live(fake, "lambda")
    lose(fake, "lambda", "terminate", first["id"])

    assert submit.finish() == 1, submit.text()
    err = bytes(submit.err).decode()
    assert err.count("renting again failed (try") == 2, submit.text()  # then the third stops
    assert re.search(r"recovery stopped: could not rent and start job rec-nocap again after 3 "
                     r"tries: lambda: no capacity for a100:1", err), submit.text()  # fmt: skip
    assert live(fake, "lambda") == []


def test_a_killed_controller_is_restarted_by_recover_and_adopts_the_running_job(
    env: dict[str, str], clouds: dict[str, RunningFake], tmp_path: Path
) -> None:
    job_id = "rec-adopt"
    started = subprocess.run(
        [GPUJOB, "submit", job_spec(tmp_path, steps=40), "--up", "a100", "--allow-cpu",
         "--job-id", job_id, "--detach"], env=env, capture_output=True, timeout=600,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr.decode()[-3000:]
    pid = job_row(env, job_id)["recovery"]["controller_pid"]
    assert pid
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat")
               .read_bytes().split()[2], "the controller gone")  # fmt: skip
    assert job_row(env, job_id)["recovery"]["controller_pid"] is None

    again = subprocess.run([GPUJOB, "recover", job_id], env=env, capture_output=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert b"it adopts the job where it is" in again.stderr
    adopted = job_row(env, job_id)["recovery"]["controller_pid"]
    assert adopted and adopted != pid
    twice = subprocess.run([GPUJOB, "recover", job_id], env=env, capture_output=True, timeout=60)
    assert f"controller pid {adopted} follows it already".encode() in twice.stderr

    follow = Command(env, "logs", job_id, "-f")
    assert follow.finish() == 0, follow.text()
    assert b"resumed from" not in follow.out and b"recovering" not in follow.err
    assert [s for s, _, _ in steps_of(bytes(follow.out))] == list(range(1, 41))
    assert live(clouds["lambda"], "lambda") == []
    row = job_row(env, job_id)
    assert (row["state"], row["recovery"]["phase"], row["recovery"]["restarts"]) == (
        "succeeded", "finished", 0)  # fmt: skip


@pytest.mark.parametrize("lost", [1, 0], ids=["node-1-lost", "node-0-lost"])
def test_only_the_lost_node_is_rented_again_and_the_two_nodes_resume_together(
    env: dict[str, str], clouds: dict[str, RunningFake], bucket: str, tmp_path: Path, lost: int
) -> None:
    """2 nodes, one host terminated through Lambda's API: one launch call after the loss,
    the other node's instance kept (its job stopped and restarted there), the world
    re-formed with the new host's address (node 0's: MASTER_ADDR moves with it), and every
    step after the resume point once."""
    job_id = f"rec-2n-{lost}"
    fake = clouds["lambda"]
    submit = Command(env, "submit", job_spec(tmp_path, nodes=2), "--up", "a100", "--allow-cpu",
                     "--job-id", job_id)  # fmt: skip
    submit.wait_for(rf"step 13/{STEPS}".encode())
    pause_job(job_id)
    wait_until(lambda: synced(bucket, job_id, "checkpoint-10"), "checkpoint-10 in S3", every=0.5)
    before = [json.loads(record) for record in job_row_hosts(env, job_id)]
    (ruleset,) = rulesets(fake)  # the job's hosts reach each other's ports, nobody else
    assert {r["source_network"] for r in ruleset["rules"]} == {f"{h['address']}/32" for h in before}
    launched = len(launches(fake))
    lose(fake, "lambda", "terminate", before[lost]["instance"].split(":", 1)[1])

    assert submit.finish() == 0, (
        submit.text() + controller_log(env, job_id) + why_it_failed(env, job_id)
    )
    err = bytes(submit.err).decode()
    name, kept = before[lost]["name"], 1 - lost
    step = resumed_step(submit)
    said = rf"recovering \(attempt 2, restart 1/2, host_lost: {name} .*from step {step}\)"
    assert re.search(said, err), submit.text()
    assert len(launches(fake)) == launched + 1, controller_log(env, job_id)
    first, *_, again = launches(fake)  # beside the kept host, on the job's ruleset
    assert again["body"]["region_name"] == first["body"]["region_name"]
    assert again["body"]["firewall_rulesets"] == [{"id": ruleset["id"]}]
    after = [json.loads(record) for record in job_row_hosts(env, job_id)]
    assert after[kept]["instance"] == before[kept]["instance"]
    assert after[lost]["instance"] != before[lost]["instance"]
    log = controller_text(env, job_id)
    assert f"replacing only node {lost} ({name}); keeping node {kept}" in log, log
    assert "renting every node again" not in log, log
    check_resumed(bytes(submit.out), STEPS, step)
    assert bytes(submit.out).count(b"rank 1/2: ready") == 2  # both nodes, in both attempts
    assert live(fake, "lambda") == []
    down = subprocess.run([GPUJOB, "down", "--all"], env=env, capture_output=True, timeout=300)
    assert rulesets(fake) == [], down.stderr


def test_a_failed_replacement_is_terminated_and_every_node_is_rented_again(
    env: dict[str, str], clouds: dict[str, RunningFake], bucket: str, tmp_path: Path
) -> None:
    """The replacement's launch creates an instance but its answer is lost: the partial
    recovery fails, that instance is found by its tag and terminated, node 0's host goes
    too, and both nodes are rented again; the job still finishes from the same checkpoint."""
    job_id = "rec-2n-fallback"
    fake = clouds["lambda"]
    submit = Command(env, "submit", job_spec(tmp_path, nodes=2), "--up", "a100", "--allow-cpu",
                     "--job-id", job_id)  # fmt: skip
    submit.wait_for(rf"step 13/{STEPS}".encode())
    pause_job(job_id)
    wait_until(lambda: synced(bucket, job_id, "checkpoint-10"), "checkpoint-10 in S3", every=0.5)
    before = [json.loads(record) for record in job_row_hosts(env, job_id)]
    launched = len(launches(fake))
    fake.control.fault("drop", op="launch", handle_first=True)
    lose(fake, "lambda", "terminate", before[1]["instance"].split(":", 1)[1])

    assert submit.finish() == 0, (
        submit.text() + controller_log(env, job_id) + why_it_failed(env, job_id)
    )
    log = controller_text(env, job_id)
    assert "replacing only node 1" in log and "renting every node again" in log, log
    assert re.search(r"terminated gpujob-\S+ \(lambda \w+\) after the failed submit --up", log), log
    assert len(launches(fake)) == launched + 3, log  # the lost answer's, then both nodes
    after = [json.loads(record) for record in job_row_hosts(env, job_id)]
    assert after[0]["instance"] != before[0]["instance"]
    check_resumed(bytes(submit.out), STEPS, resumed_step(submit))
    assert live(fake, "lambda") == []


def resumed_step(submit: Command) -> int:
    """The step the job resumed from: 10, or 20 where the kept node's agent, stopped,
    shipped checkpoint-20 (the job had got past it before the pause took hold)."""
    found = re.search(rb"resumed from checkpoint-(\d+) \(step", bytes(submit.out))
    assert found, submit.text()
    assert int(found[1]) in (10, 20), submit.text()
    return int(found[1])


def why_it_failed(env: dict[str, str], job_id: str) -> str:
    """The lines of the job's shipped logs (S3) that say why a rank ended, for a failure's
    message: the follow's own output keeps only its end."""
    shown = []
    for node in ("0", "1"):
        done = subprocess.run([GPUJOB, "logs", job_id, "--node", node], env=env,
                              capture_output=True, timeout=120)  # fmt: skip
        text = done.stdout.decode(errors="replace")
        shown += [f"node {node}: {line}" for line in text.splitlines()
                  if re.search(r"cannot resume|Error|resumed|warning|refused", line)]  # fmt: skip
    return "\n--- why (shipped logs) ---\n" + "\n".join(shown[-40:])


def launches(fake: RunningFake) -> list[dict[str, Any]]:
    return [r for r in fake.control.requests() if r["op"] == "launch"]


def rulesets(fake: RunningFake) -> list[dict[str, Any]]:
    reply = requests.get(f"{fake.url}/firewall-rulesets", timeout=10,
                         headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"})  # fmt: skip
    reply.raise_for_status()
    return list(reply.json()["data"])


def controller_log(env: dict[str, str], job_id: str) -> str:
    """The end of the controller's own log, for a failure's message."""
    return f"\n--- controller log (end) ---\n{controller_text(env, job_id)[-8000:]}"


def controller_text(env: dict[str, str], job_id: str) -> str:
    """The controller's whole log, for what a test asserts of it (a loaded run writes more
    lines, and its first ones fall out of the end a message shows)."""
    path = Path(env["GPUJOB_STATE_DIR"]) / "recovery" / f"{job_id}.log"
    return path.read_text(errors="replace") if path.exists() else "(none)"


def job_row_hosts(env: dict[str, str], job_id: str) -> list[str]:
    """The job's hosts as its record holds them, read from the state db."""
    import sqlite3

    db = Path(env["GPUJOB_STATE_DIR"]) / "state.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        (hosts,) = conn.execute("SELECT hosts FROM jobs WHERE id=?", (job_id,)).fetchone()
    return json.loads(hosts)


def test_sync_ckpt_pushes_a_rented_jobs_checkpoints_and_a_pull_verifies_them(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, tmp_path: Path
) -> None:
    """`sync-ckpt JOB` of a job on a Lambda-fake host (issue 25): reached through its target,
    it pushes the host's complete checkpoints; a pull of the latest equals the host's copy."""
    spec = tmp_path / "qs.yaml"
    spec.write_text(
        f"name: qs\nimage: lab-cpu\nworkdir: {REPO / 'jobs' / 'quickstart'}\n"
        "resources: {cpus: 2, disk_gb: 1}\n"
        "run: {entrypoint: train.py, nproc_per_node: 1, args: "
        '["--steps", "20", "--seq-len", "64", "--log-every", "5"]}\n'
        "batch: {global_batch: 16, micro_batch: 4}\nenvs: {OMP_NUM_THREADS: 1}\n"
        "checkpoints: {dir: checkpoints, every_steps: 10, keep_last: 2}\n"
    )
    argv = [GPUJOB, "submit", str(spec), "--up", "a100", "--allow-cpu", "--job-id", "sc-up"]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    pushed = subprocess.run([GPUJOB, "sync-ckpt", "sc-up", "--to", "lab:runs/sc", "--json"],
                            env=env, capture_output=True, timeout=300)  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr.decode()[-3000:]
    moved = json.loads(pushed.stdout)["checkpoints"]
    assert [(m["name"], m["verified"]) for m in moved] == [
        ("checkpoint-10", True), ("checkpoint-20", True)]  # fmt: skip
    (instance_id,) = [i for i, r in backend.records.items() if r.get("host")]
    from infra.lab import boot

    host_ckpts = (boot.host_dir(backend.records[instance_id]["host"]) / "root" / ".gpujob"
                  / "jobs" / "sc-up" / "checkpoints")  # fmt: skip
    fresh = tmp_path / "fresh"
    pulled = subprocess.run([GPUJOB, "sync-ckpt", "--from", "lab:runs/sc", "--latest", "--dest",
                             str(fresh)], env=env, capture_output=True, timeout=300)  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr.decode()[-2000:]

    def files(path: Path) -> dict[str, bytes]:
        return {p.relative_to(path).as_posix(): p.read_bytes()
                for p in path.rglob("*") if p.is_file() and p.name != MARKER}  # fmt: skip

    assert files(fresh / "checkpoint-20") == files(host_ckpts / "checkpoint-20")
    assert files(fresh / "checkpoint-20")
