"""`notify:` from the spec and the user config to node 0's job.json and the start's stdin
(names in files, URLs only on stdin or in a 0600 file under SLURM), its refusals (one line
naming the file, line and field), and the agent's POST against a real loopback server that
fails before it answers."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from planning import spec_of, target, written

from launcher.agent import AGENT_SOURCE, INIT_LOCK_SOURCE
from launcher.agent.notify import Hook, message, post
from launcher.plan.build import Sources, build_plan
from launcher.plan.model import RunCommand
from launcher.plan.slurm import SlurmCluster, build_slurm_plan

URL = "https://hooks.example.test/services/T0-secret"
HOOK = Hook("SLACK_URL", ("failed", "succeeded"), URL)
SOURCES = Sources(workdir="/src/work", agent=str(AGENT_SOURCE), init_lock=str(INIT_LOCK_SOURCE),
                  notify=(HOOK,))  # fmt: skip


def start_of(node) -> RunCommand:
    return next(s for s in node.steps if isinstance(s, RunCommand) and s.starts_job)


def test_node_0_alone_has_the_hooks_names_in_job_json_and_the_url_on_stdin() -> None:
    plan = build_plan(spec_of(nodes=2), target(2), "job-1", {}, None, SOURCES)
    first = json.loads(written(plan.nodes[0], "job.json").content)
    assert first["notify"] == {"hooks": [{"env": "SLACK_URL", "on": ["failed", "succeeded"]}],
                               "price_per_hour": None}  # fmt: skip
    assert "notify" not in json.loads(written(plan.nodes[1], "job.json").content)
    given = start_of(plan.nodes[0]).input
    assert given is not None and json.loads(given.content)["notify"] == {"SLACK_URL": URL}
    assert given.names == ("SLACK_URL",)  # what the dry run shows
    assert start_of(plan.nodes[1]).input is None
    assert URL not in repr(plan)  # what --dry-run prints is built from it


def test_under_slurm_the_url_is_in_a_0600_file_the_agent_deletes() -> None:
    cluster = SlurmCluster(name="hpc", login="hpc", shared="/scratch/me", account="proj",
                           partition="gpu", where="hosts.yaml: hosts[0] (hpc)")  # fmt: skip
    planned = build_slurm_plan(spec_of(), cluster, "t-1", {}, None, SOURCES,
                               python="/usr/bin/python3")  # fmt: skip
    node = planned.plan.nodes[0]
    assert json.loads(written(node, "job.json").content)["notify_file"] == "notify.json"
    secret = written(node, "notify.json")
    assert (secret.mode, secret.secret, json.loads(secret.content)) == (
        0o600,
        True,
        {"SLACK_URL": URL},
    )


def test_cancelling_a_slurm_job_that_never_started_deletes_its_url_file(tmp_path: Path) -> None:
    """scancel's clean-up (SECRETS_RM, run with sh on the login host) removes every secret
    file the plan writes for the agent to read at its start, the webhook's URL's included: a
    queued job cancelled before it ran left notify.json on the cluster's shared disk."""
    import subprocess

    from launcher.plan.model import WriteFile
    from launcher.targets.slurm.cancel import SECRETS_RM

    cluster = SlurmCluster(name="hpc", login="hpc", shared="/scratch/me", account="proj",
                           partition="gpu", where="hosts.yaml: hosts[0] (hpc)")  # fmt: skip
    planned = build_slurm_plan(spec_of(nodes=2), cluster, "t-1", {"TOKEN": "t0ken"}, None,
                               SOURCES, python="/usr/bin/python3")  # fmt: skip
    left = []
    for node in planned.plan.nodes:
        for step in node.steps:
            if isinstance(step, WriteFile) and step.secret:
                path = tmp_path.joinpath(*step.path.split("/")[-2:])
                path.parent.mkdir(exist_ok=True)
                path.write_text(step.content)
                left.append(path)
    assert {p.name for p in left} >= {"notify.json", "secrets.json"}
    subprocess.run(["sh", "-c", SECRETS_RM, "sh", str(tmp_path)], check=True)
    assert [p for p in left if p.exists()] == []


@pytest.mark.parametrize(("entry", "said"), [
    ("{webhook_env: SLACK_URL, on: [failed, finished]}",
     "notify.0.on: `finished` is not an event; use succeeded, failed, timed_out, cancelled, "
     "recovered"),
    ("{webhook_env: 'https://hooks.slack.com/x', on: [failed]}",
     "notify.0: webhook_env is not a variable name (its value is not shown: it may be the "
     "URL); name the variable that holds the URL, e.g. SLACK_URL, and export it"),
])  # fmt: skip
def test_a_bad_entry_is_one_line_naming_file_line_and_field(
    gpujob, tmp_path: Path, entry: str, said: str
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: t\nimage: host\nrun: {{entrypoint: t.py}}\nnotify:\n  - {entry}\n")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"gpujob: error: {spec}:5: {said}"


@pytest.mark.parametrize(("entry", "said"), [
    ('"https://hooks.slack.com/services/T0/B0/s3cret"', "notify: Input should be a valid list"),
    ('["https://hooks.slack.com/services/T0/B0/s3cret"]',
     "notify.0: Input should be a valid dictionary or instance of NotifySpec"),
    ('[{webhook_env: SLACK_URL, on: "https://hooks.slack.com/services/T0/B0/s3cret"}]',
     "notify.0.on: Input should be a valid list"),
])  # fmt: skip
def test_a_url_pasted_where_the_spec_wants_a_list_is_never_echoed(
    gpujob, tmp_path: Path, entry: str, said: str
) -> None:
    """The refusal names the file, line and field but not the value: it is the URL."""
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: t\nimage: host\nrun: {{entrypoint: t.py}}\nnotify: {entry}\n")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"gpujob: error: {spec}:4: {said}"
    assert "s3cret" not in result.stderr + result.stdout


def test_the_user_configs_hooks_join_the_specs_and_its_mistakes_name_its_line(
    gpujob, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(config))
    monkeypatch.setenv("TEAM_HOOK", "https://discord.example.test/api/webhooks/1/tok")
    (config / "config.yaml").write_text("budget: {max_cost: 5}\nnotify:\n  - {webhook_env: "
                                        "TEAM_HOOK, on: [recovered, failed]}\n")  # fmt: skip
    from launcher.jobs.notify import config_notify

    ((entry, where),) = config_notify()
    assert (entry.webhook_env, entry.on, where) == ("TEAM_HOOK", ["failed", "recovered"],
                                                    f"{config / 'config.yaml'}:3")  # fmt: skip
    (config / "config.yaml").write_text("notify:\n  - webhook_env: TEAM_HOOK\n    on: [done]\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nrun: {entrypoint: t.py}\n")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0].startswith(
        f"gpujob: error: {config / 'config.yaml'}:3: notify.0.on: `done` is not an event"
    )


class Flaky(BaseHTTPRequestHandler):
    """Answers 503 to the first `fail` POSTs, then 200; keeps what it was sent."""

    fail = 2
    seen: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        self.seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(503 if len(self.seen) <= self.fail else 200)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def test_a_post_is_retried_with_backoff_until_the_webhook_answers() -> None:
    handler = type("Handler", (Flaky,), {"seen": [], "fail": 2})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/hook"
    try:
        body = message("j-1", "failed", "exit code 3", "$0.12", ["loss 0.5"])
        assert post(url, body, tries=4, delay_s=0.01) is None
        assert len(handler.seen) == 3 and handler.seen[-1] == body
        handler.fail = 10
        said = post(url, body, tries=2, delay_s=0.01)
        assert said == "HTTP 503 after 2 tries" and url not in said
    finally:
        server.shutdown()
        server.server_close()
    gone = post(url, body, tries=1)
    assert gone is not None and "127.0.0.1" not in gone and "hook" not in gone


def test_the_body_speaks_slack_and_discord_and_stays_under_discords_limit() -> None:
    body = message("j-1", "timed_out", "max_duration 1h", "$2.00", ["x" * 5000])
    assert body["text"] == body["content"] and len(body["content"]) <= 1900
    assert body["text"].startswith("gpujob: job j-1 timed out\nreason: max_duration 1h\n"
                                   "cost so far: $2.00\nlast lines:")  # fmt: skip


def test_a_rented_hosts_price_goes_to_the_agent() -> None:
    rented = replace(target(), hosts=("gpujob-a100-x",), addresses=("192.0.2.9",))
    plan = build_plan(spec_of(), rented, "job-1", {}, None, replace(SOURCES, price_per_hour=1.29))
    assert (
        json.loads(written(plan.nodes[0], "job.json").content)["notify"]["price_per_hour"] == 1.29
    )


def test_a_webhook_that_never_answers_does_not_keep_the_others_from_being_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each hook is posted to on its own: the first one's endpoint accepts and never
    answers (its tries outlast the agent's wait), and the second still gets the job's end."""
    import socket

    from launcher.agent import notify

    monkeypatch.setattr(notify, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(notify, "WAIT_S", 1.5)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections are taken by the kernel and never answered
    handler = type("Handler", (Flaky,), {"seen": [], "fail": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    urls = {"DEAD_URL": f"http://127.0.0.1:{silent.getsockname()[1]}/hook",
            "TEAM_URL": f"http://127.0.0.1:{server.server_port}/hook"}  # fmt: skip
    config = {"job_id": "j-1", "notify": {"hooks": [{"env": name, "on": ["failed"]}
                                                    for name in urls]}}  # fmt: skip
    said: list[str] = []
    try:
        notify.notify_end(Path("/nonexistent"), config, urls, {"state": "failed"}, said.append)
        assert [seen["event"] for seen in handler.seen] == ["failed"]
        assert said == ["notify: failed to the webhook in $TEAM_URL delivered"]
    finally:
        server.shutdown()
        server.server_close()
        silent.close()
