"""`notify:` webhooks through the real CLI and agent on this machine: a local HTTP server
stands in for Slack/Discord and must receive exactly one JSON POST per event, whose URL (a
secret) is in no log, job file or state file afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.fakes.webhook import TOKEN, Webhook

pytestmark = pytest.mark.e2e

GPUJOB = str(Path(sys.executable).with_name("gpujob"))
TIMED_OUT = 124


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.close()


def job_spec(folder: Path, code: int) -> Path:
    """Exits `code`; 124 sleeps past its `max_duration` instead."""
    (folder / "work").mkdir(parents=True)
    end = "import time; time.sleep(120)" if code == TIMED_OUT else f"raise SystemExit({code})"
    (folder / "work" / "prog.py").write_text(f"print('epoch 1 loss 0.5', flush=True)\n{end}\n")
    spec = folder / "job.yaml"
    spec.write_text(
        "name: hooked\nimage: host\nworkdir: work\n"
        "run: {entrypoint: prog.py, launcher: none}\n"
        "notify:\n  - webhook_env: GJ_HOOK_URL\n    on: [failed, succeeded, timed_out]\n"
        + "max_duration: 3s\n"
        * (code == TIMED_OUT)
    )
    return spec


def test_one_post_per_end_with_the_last_lines_and_the_url_nowhere_on_disk(
    webhook: Webhook, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = dict(os.environ, GPUJOB_STATE_DIR=str(state), GJ_HOOK_URL=webhook.url)
    ends = {}
    for code in (0, 3, TIMED_OUT):
        spec = job_spec(tmp_path / f"job{code}", code)
        done = subprocess.run([GPUJOB, "submit", str(spec), "--job-id", f"hooked-{code}"],
                              env=env, capture_output=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == code, done.stderr.decode()[-2000:]
        ends[f"hooked-{code}"] = done
    deadline = time.monotonic() + 60  # each agent posts once its end is recorded
    while len(webhook.received) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(webhook.events()) == [
        ("hooked-0", "succeeded"), ("hooked-124", "timed_out"), ("hooked-3", "failed")
    ]  # fmt: skip
    for post in webhook.received:
        body = post["body"]
        assert post["path"] == f"/services/{TOKEN}" and post["type"] == "application/json"
        assert body["text"] == body["content"]  # Slack reads one, Discord the other
        assert body["text"].startswith(
            f"gpujob: job {body['job_id']} {body['event']}".replace("_", " ")
        )
        assert "epoch 1 loss 0.5" in body["text"] and "cost so far" in body["text"]
    said = {p["body"]["event"]: p["body"]["text"] for p in webhook.received}
    assert "reason: exit code 3" in said["failed"]
    assert "reason: timed out after 3s (max_duration)" in said["timed_out"]
    log = (state / "jobs" / "hooked-0" / "node-0" / "job.log").read_text()
    assert "notify: succeeded to the webhook in $GJ_HOOK_URL delivered" in log
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        assert TOKEN.encode() not in path.read_bytes(), path
    for done in ends.values():
        assert TOKEN.encode() not in done.stdout + done.stderr


def test_an_unset_webhook_variable_is_one_line_naming_the_spec_line(tmp_path: Path) -> None:
    spec = job_spec(tmp_path, 0)
    env = {k: v for k, v in os.environ.items() if k != "GJ_HOOK_URL"}
    env["GPUJOB_STATE_DIR"] = str(tmp_path / "state")
    done = subprocess.run([GPUJOB, "submit", str(spec), "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        f"gpujob: error: {spec}:6: notify: GJ_HOOK_URL is not set in your environment. "
        "export GJ_HOOK_URL=https://... (the webhook's URL) before submitting; its value is "
        "never written to the spec, a command line or a log"
    )


def test_a_webhook_that_does_not_answer_never_holds_up_the_jobs_end(tmp_path: Path) -> None:
    """Its posts are retried after the end is recorded: the submit ends with the job, and
    the log says later that the post was not delivered (naming the variable, not the URL)."""
    with socket.socket() as probe:  # a port nobody listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/services/{TOKEN}"
    state = tmp_path / "state"
    env = dict(os.environ, GPUJOB_STATE_DIR=str(state), GJ_HOOK_URL=closed)
    started = time.monotonic()
    done = subprocess.run([GPUJOB, "submit", str(job_spec(tmp_path, 0)), "--job-id", "deaf"],
                          env=env, capture_output=True, timeout=300, check=False)  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0 and took < 10, (took, done.stderr.decode()[-2000:])
    log = state / "jobs" / "deaf" / "node-0" / "job.log"
    deadline = time.monotonic() + 60
    while "not delivered" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    said = [line for line in log.read_text().splitlines() if "notify:" in line]
    assert said == ["[gpujob-agent] notify: succeeded to the webhook in $GJ_HOOK_URL not "
                    "delivered: [Errno 111] Connection refused after 5 tries"]  # fmt: skip
