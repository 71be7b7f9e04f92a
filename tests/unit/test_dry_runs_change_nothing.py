"""A dry run prints what the real path runs and changes nothing: apply runs only the Plan's
commands (the ones the dry run prints), `<home>` stands where a dry run could not ask for
the home folder, and `up`, `down`, `cancel` and `sync-ckpt` leave the state dir byte for byte
as they found it while printing the commands their real path then runs."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from clouds import PUBLIC_KEY, BannerBackend, BannerServer, lambda_instances, point_at
from planning import plan_of, spec_of, target

from infra.fakes import LAMBDA_API_KEY, RunningFake, serve_lambda
from launcher.plan.model import UNKNOWN_HOME, Plan, RunCommand
from launcher.plan.show import plan_text, shell_join, shell_word, shown
from launcher.remote.base import Result
from launcher.remote.batch import File, Outcome, Run, Sync
from launcher.runtime import apply
from launcher.state.db import JobRecord, StateDB

IMAGE = "registry.example/gpujob/job:lab-cpu"
TWO = replace(
    target(2, hosts=("a", "b"), addresses=("10.77.0.5", "10.77.0.6"), job_root="/root/jobs"),
    runtime="docker", python="python3", image_ref=IMAGE,
)  # fmt: skip


class Host:
    """A Connection that records every command it is asked to run and answers ok (or
    fails the argv `fail` names)."""

    def __init__(self, host: str, fail: tuple[str, ...] = ()) -> None:
        self.host = host
        self.fail = fail
        self.ran: list[tuple[str, ...]] = []
        self.files: list[str] = []
        self.given: list[bytes | None] = []
        """What each command got on its stdin."""

    def run(self, argv: Any, *, stream: bool = False, input: bytes | None = None) -> Result:
        self.ran.append(tuple(argv))
        self.given.append(input)
        if tuple(argv) == self.fail:
            return Result(1, "", "no")
        return Result(0, "1\n", "")

    def batch(self, ops: list[Any]) -> Outcome:
        outcome = Outcome()
        for op in ops:
            if isinstance(op, Run):
                self.ran.append(tuple(op.argv))
                self.given.append(op.input)
                outcome.runs.append(Result(0, "", '{"offset": 0, "state": "running"}'))
                outcome.outputs.append(b"")
            elif isinstance(op, File | Sync):
                self.files.append(op.path)
        return outcome

    def put(self, path: str, content: bytes, mode: int) -> None:
        self.files.append(path)

    def put_file(self, source: str, path: str, mode: int) -> None:
        self.files.append(path)

    def close(self) -> None:
        pass


def plan_commands(plan: Plan) -> dict[str, list[tuple[str, ...]]]:
    """Every command the Plan holds, by the host it runs on."""
    held: dict[str, list[tuple[str, ...]]] = {}
    for node in plan.nodes:
        steps = [s for s in node.steps if isinstance(s, RunCommand)]
        held.setdefault(node.host, []).extend(s.argv for s in steps)
        if node.on_failure:
            held[node.host].append(node.on_failure.argv)
    for check in plan.checks:
        held[check.host].append(check.listen)
        for host in check.from_hosts:
            held[host].append(check.dial)
    return held


def printed(argv: tuple[str, ...], text: str) -> bool:
    """The argv is in the dry run's text: its line (a script as `<script>`, then its lines)."""
    script = next((w for w in argv if "\n" in w), None)
    if script is None:
        return f"run {shell_join(argv)}\n" in text or f"run   {shell_join(argv)}\n" in text
    words = " ".join("<script>" if w == script else shell_word(w) for w in argv)
    body = "".join(f"    | {line}".rstrip() + "\n" for line in script.splitlines())
    return words in text and body in text


def test_apply_runs_on_each_host_only_commands_the_dry_run_prints() -> None:
    plan = plan_of(spec_of(nodes=2, secrets=[]), TWO)
    hosts = {"a": Host("a"), "b": Host("b")}
    apply.apply_plan(plan, hosts, lambda _: None)  # type: ignore[arg-type]
    held, text = plan_commands(plan), plan_text(plan)
    for name, host in hosts.items():
        assert host.ran, name
        for argv in host.ran:
            assert argv in held[name], f"{name} ran {argv} which the plan does not hold"
            assert printed(argv, text), f"the dry run does not print {shlex.join(argv)}"
    started = [argv for host in hosts.values() for argv in host.ran if "start" in argv]
    assert len(started) == 2  # after both were prepared and the reach check passed
    assert hosts["a"].ran.index(plan.checks[0].listen) < hosts["a"].ran.index(started[0])


@pytest.mark.parametrize("nodes", [1, 2])
def test_the_secrets_go_only_on_the_starts_stdin_as_the_dry_run_says(nodes: int) -> None:
    plan = plan_of(spec_of(nodes=nodes, secrets=["TOKEN"]), TWO if nodes == 2 else
                   target(1, hosts=("a",)), secrets={"TOKEN": "v4lue"})  # fmt: skip
    hosts = {"a": Host("a"), "b": Host("b")}
    apply.apply_plan(plan, hosts, lambda _: None)  # type: ignore[arg-type]
    for node in plan.nodes:
        host = hosts[node.host]
        given = {argv: data for argv, data in zip(host.ran, host.given, strict=True) if data}
        assert given == {node.start.argv: node.start.input.content.encode()}  # type: ignore[union-attr]
        assert b"v4lue" in given[node.start.argv]
    assert "# on its stdin, never in a file on the host: TOKEN=***" in plan_text(plan)


def test_a_failed_start_stops_the_started_nodes_with_the_printed_cancel() -> None:
    plan = plan_of(spec_of(nodes=2), TWO)
    hosts = {"a": Host("a"), "b": Host("b", fail=plan.nodes[1].start.argv)}
    with pytest.raises(Exception, match="could not start the job"):
        apply.apply_plan(plan, hosts, lambda _: None)  # type: ignore[arg-type]
    cancel = plan.nodes[0].on_failure
    assert cancel is not None and hosts["a"].ran[-1] == cancel.argv
    assert "cancel" in cancel.argv and printed(cancel.argv, plan_text(plan))
    assert "if a node fails to start, every node whose start went out is stopped" in plan_text(plan)
    assert printed(plan.nodes[1].on_failure.argv, plan_text(plan))  # type: ignore[union-attr]
    assert "cancel" not in hosts["b"].ran[-1]  # its start answered a failure: it does not run


@pytest.mark.parametrize("follow", [True, False])
def test_a_one_node_start_reads_the_log_only_as_its_plan_says(follow: bool) -> None:
    plan = plan_of_follow(follow)
    host = Host("a")
    first = apply.apply_plan(plan, {"a": host}, lambda _: None)  # type: ignore[arg-type]
    start = plan.nodes[0].start
    assert host.ran[-1] == start.argv and start.reads_log == follow
    assert (start.argv[-1] == "1") == follow and printed(start.argv, plan_text(plan))
    assert bool(first) == follow


def plan_of_follow(follow: bool) -> Plan:
    from launcher.agent import AGENT_SOURCE, INIT_LOCK_SOURCE
    from launcher.plan.build import Sources, build_plan

    sources = Sources(workdir="/src/work", agent=str(AGENT_SOURCE), init_lock=str(INIT_LOCK_SOURCE))
    where = replace(TWO, hosts=("a",), addresses=("10.77.0.5",))
    return build_plan(spec_of(), where, "job-1", {}, None, sources, follow=follow)


def test_the_unknown_home_is_shown_unquoted_as_the_words_a_shell_gets() -> None:
    """`<home>` replaced by the real home gives, word for word, what the shell would get."""
    words = (f"{UNKNOWN_HOME}/.gpujob/jobs/j", f"{UNKNOWN_HOME}/a b",
             f"--volume={UNKNOWN_HOME}/w:{UNKNOWN_HOME}/w", "$HOME", "plain")  # fmt: skip
    line = shell_join(words)
    assert line.startswith("<home>/.gpujob/jobs/j <home>'/a b' ")
    assert "'<home>" not in line and "~" not in line
    home = "/home/someone"
    assert shlex.split(line.replace("<home>", home)) == [
        w.replace(UNKNOWN_HOME, home) for w in words
    ]
    script = f"env={shlex.quote(UNKNOWN_HOME + '/x')}\nother={shlex.quote(UNKNOWN_HOME + '/a b')}"
    assert shown(script) == "env=<home>/x\nother=<home>'/a b'"


def test_an_ssh_dry_run_shows_home_paths_as_the_host_will_take_them(
    gpujob: Callable, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: work\nnodes: 2\nrun:\n  entrypoint: train.py\n")
    done = gpujob("submit", str(spec), "--on", "root@192.0.2.1,root@192.0.2.2", "--dry-run",
                  "--job-id", "j")  # fmt: skip
    assert done.exit_code == 0, done.stderr
    assert "job dir <home>/.gpujob/jobs/j\n" in done.stdout
    assert UNKNOWN_HOME not in done.stdout and "'<home>" not in done.stdout
    assert "~/" not in done.stdout
    assert "start <home>/.gpujob/jobs/j/node-0\n" in done.stdout
    assert "<home> is the login's home folder there" in done.stderr
    data = json.loads(gpujob("submit", str(spec), "--on", "root@192.0.2.1,root@192.0.2.2",
                             "--dry-run", "--json", "--job-id", "j").stdout)  # fmt: skip
    assert data["nodes"][0]["job_dir"] == "<home>/.gpujob/jobs/j"
    assert data["checks"][0]["listen"][:2] == ["python3", "-c"]


# `up`, `down`, `cancel`, `sync-ckpt`: the state dir before and after


def snapshot(root: Path) -> dict[str, bytes] | None:
    if not root.exists():
        return None
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> Iterator[Any]:
    banner = BannerServer()
    fake = serve_lambda(BannerBackend(banner))
    point_at(monkeypatch, tmp_path, lam=fake, banner=banner)
    yield fake
    fake.stop()
    banner.close()


def launch_tagged(fake: RunningFake, name: str) -> str:
    """An instance tagged as gpujob's, made behind gpujob's back (an `up` cut short)."""
    import requests

    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {LAMBDA_API_KEY}"
    session.post(f"{fake.url}/ssh-keys", json={"name": "other", "public_key": PUBLIC_KEY})
    reply = session.post(f"{fake.url}/instance-operations/launch", json={
        "region_name": "us-west-1", "instance_type_name": "gpu_1x_a10",
        "ssh_key_names": ["other"], "name": name}, timeout=10)  # fmt: skip
    reply.raise_for_status()
    return reply.json()["data"]["instance_ids"][0]


def test_up_and_down_dry_runs_create_no_state_db(cloud: Any, gpujob: Callable,
                                                 state_dir: Path) -> None:  # fmt: skip
    stranger = launch_tagged(cloud, "gpujob-stranger")
    up = gpujob("up", "a100", "--dry-run")
    assert up.exit_code == 0, up.stderr
    assert "would launch 1 x" in up.stderr
    assert "not ours, left alone: gpujob-stranger" in up.stderr
    down = gpujob("down", "--all", "--dry-run")
    assert down.exit_code == 0, down.stderr
    assert "not ours, left alone: gpujob-stranger" in down.stderr and down.stdout == ""
    forced = gpujob("down", stranger, "--force", "--dry-run")
    assert forced.exit_code == 0, forced.stderr
    assert forced.stdout.startswith("would terminate gpujob-stranger (lambda ")
    assert "lambda.terminate(" in forced.stdout
    assert not state_dir.exists()  # no db, no owner id, no pins
    assert len([i for i in lambda_instances(cloud) if i["status"] == "active"]) == 1


def test_down_dry_run_changes_no_row_and_says_what_it_would_reconcile_and_cancel(
    cloud: Any, gpujob: Callable, state_dir: Path
) -> None:
    from launcher.remote.hosts import HostEntry
    from launcher.state.hosts import HostsDB

    made = gpujob("up", "a100", "--yes", "--no-bootstrap")
    assert made.exit_code == 0, made.stderr
    name = made.stdout.splitlines()[-1].split("\t")[0]
    HostsDB().intend("gpujob-a100-cut", "lambda", "a100")  # its launch answer was lost ...
    cut = launch_tagged(cloud, "gpujob-a100-cut")  # ... but the cloud made it
    node_dir = "/home/ubuntu/.gpujob/jobs/train-1/node-0"
    StateDB().add_job(JobRecord(
        id="train-1", name="train", spec_path="job.yaml", provider="lambda", runtime="docker",
        hosts=[HostEntry(name=name, address="127.0.0.1").to_record()], node_dirs=[node_dir],
        state="running", exit_code=None, created_at=time.time(), ended_at=None,
        last_line=None))  # fmt: skip
    before = snapshot(state_dir)
    down = gpujob("down", "--all", "--dry-run")
    assert down.exit_code == 0, down.stderr
    assert snapshot(state_dir) == before
    assert f"would adopt gpujob-a100-cut (lambda {cut})" in down.stderr
    lines = down.stdout.splitlines()
    assert lines[0] == (f"would ask job train-1's agents (on {name}) for its state and, if it "
                        "still runs, cancel it first:")  # fmt: skip
    from launcher.targets.base import target_for

    job = StateDB().job("train-1")
    assert job is not None
    (argv,) = [node.cancel_argv(30.0) for node in target_for(job).nodes(job)]
    assert lines[1] == "  run its down hooks (config.hooks), if it has any, on node 0 first"
    assert lines[2] == f"  node 0 on {name}: {shlex.join(argv)}"
    assert argv == ["python3", "-S", "/home/ubuntu/.gpujob/jobs/train-1/gpujob-agent.py", "cancel",
                    node_dir, "30"]  # fmt: skip
    terminated = sorted(line.split()[2] for line in lines if line.startswith("would terminate"))
    assert terminated == sorted([name, "gpujob-a100-cut"])
    again = gpujob("up", "a100", "--dry-run")
    assert again.exit_code == 0 and "would adopt gpujob-a100-cut" in again.stderr
    assert snapshot(state_dir) == before
    StateDB().update_job("train-1", "succeeded", exit_code=0)  # nothing left to cancel
    real = gpujob("down", "--all")
    assert real.exit_code == 0, real.stderr
    assert "adopted gpujob-a100-cut" in real.stderr and snapshot(state_dir) != before


def local_job(tmp_path: Path, care: dict[str, Any] | None = None) -> JobRecord:
    job_dir = tmp_path / "jobs" / "j1"
    (job_dir / "node-0").mkdir(parents=True)
    (job_dir / "node-0" / "job.json").write_text(json.dumps({"checkpoints": care or {}}))
    job = JobRecord(id="j1-20260101-000000-abcd", name="j1", spec_path=str(tmp_path / "j.yaml"),
                    provider="local", runtime="bare", hosts=["local"],
                    node_dirs=[str(job_dir / "node-0")], state="running", exit_code=None,
                    created_at=time.time(), ended_at=None, last_line=None)  # fmt: skip
    StateDB().add_job(job)
    return job


def test_cancel_dry_run_prints_the_argv_cancel_runs_and_changes_nothing(
    gpujob: Callable, tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = gpujob("cancel", "nope", "--dry-run")
    assert missing.exit_code == 2 and not state_dir.exists()  # no db made to say so
    job = local_job(tmp_path)
    before = snapshot(state_dir)
    dry = gpujob("cancel", "j1", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert snapshot(state_dir) == before
    host = Host("local")
    monkeypatch.setattr("launcher.targets.local.local_connections", lambda: {"local": host})
    real = gpujob("cancel", "j1")
    assert real.exit_code == 0, real.stderr
    assert dry.stdout == "".join(f"node 0 on local: {shlex.join(argv)}\n" for argv in host.ran)
    assert host.ran == [(sys.executable, "-S", f"{tmp_path}/jobs/j1/gpujob-agent.py", "cancel",
                         job.node_dirs[0], "30")]  # fmt: skip
    assert StateDB().job("j1").state == "cancelled"  # type: ignore[union-attr]


class SyncHost(Host):
    """This machine as sync-ckpt reaches it: job.json read back, a scratch folder, ckpt_sync's
    dry-run answer."""

    def __init__(self, job_json: str) -> None:
        super().__init__("local")
        self.job_json = job_json

    def run(self, argv: Any, *, stream: bool = False, input: bytes | None = None) -> Result:
        self.ran.append(tuple(argv))
        self.given.append(input)
        if argv[0] == "cat":
            return Result(0, self.job_json, "")
        if list(argv) == ["mktemp", "-d"]:
            return Result(0, "/tmp/gpujob-test-scratch\n", "")
        if "--dry-run" in argv:
            return Result(0, "rclone copy a b\ncheckpoint-20: 0 file(s), 0 bytes, planned\n", "")
        return Result(0, "checkpoint-20: 3 file(s), 10 bytes, verified\n", "")


def test_sync_ckpt_dry_run_prints_the_command_the_push_runs_and_changes_nothing(
    gpujob: Callable, tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.yaml").write_text(
        "remotes:\n  t: {provider: Other, endpoint: 'http://127.0.0.1:9', bucket: ckpts,"
        " access_key_env: T_KEY, secret_key_env: T_SECRET}\n"
    )
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(config))
    monkeypatch.setenv("T_KEY", "key-id")
    monkeypatch.setenv("T_SECRET", "sekret-value")
    job = local_job(tmp_path, {"dir": f"{tmp_path}/jobs/j1/checkpoints", "sync_remote": "t:run"})
    host = SyncHost((Path(job.node_dirs[0]) / "job.json").read_text())
    monkeypatch.setattr("launcher.remote.local.LocalConnection", lambda: host)
    before, config_before = snapshot(state_dir), snapshot(config)
    dry = gpujob("sync-ckpt", "j1", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert snapshot(state_dir) == before and snapshot(config) == config_before
    assert "sekret-value" not in dry.stdout and "key-id" not in dry.stdout
    assert "rclone copy a b\n" in dry.stdout  # ckpt_sync's own account of its rclone commands
    assert host.ran[-1] == ("rm", "-rf", "/tmp/gpujob-test-scratch")  # its scratch, gone
    shown_runs = [line.split(" run   ", 1)[1] for line in dry.stdout.splitlines()
                  if line.startswith("on local: run ")]  # fmt: skip
    host.ran.clear()
    host.given.clear()
    real = gpujob("sync-ckpt", "j1")
    assert real.exit_code == 0, real.stderr
    assert [shlex.join(argv) for argv in host.ran[1:]] == shown_runs  # after `cat job.json`
    assert shown_runs[0].startswith(f"{sys.executable} {tmp_path}/jobs/j1/ckpt_sync.py push ")
    assert shown_runs[0].endswith(" --env-file -")  # the remote's keys: on its stdin only
    assert "its stdin, never a file on the host: RCLONE_CONFIG_" in dry.stdout
    given = [data for data in host.given if data]
    assert len(given) == 1 and b"sekret-value" in given[0]
