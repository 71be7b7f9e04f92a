"""`--keep-on-failure`: the window as users write it, which ends keep hosts (a failure only),
the host side's bound (the watcher ends the host at the window's end even while busy) and
what the keep leaves in a node's folder, and the refusals before anything is rented.

The watcher runs as a real process where it must (its `start` reloads the config the keep
wrote); what keeps a host busy is handed to an in-process watcher, as in
test_autostop_watcher.py, since the real checks would see this machine's SSH sessions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clouds import calls, lambda_instances

from infra.fakes import RunningFake
from launcher.agent import AUTOSTOP_SOURCES
from launcher.agent.agent_os import start_ticks
from launcher.agent.autostop import Watcher
from launcher.errors import UsageError
from launcher.jobs.keep import keeps_hosts
from launcher.spec.keep import keep_window, window_seconds
from launcher.targets.cloud.keep import how_to_look


@pytest.mark.parametrize(("text", "seconds"), [
    ("30m", 1800), ("2h", 7200), ("90", 90), ("90s", 90), ("1.5h", 5400), ("1d", 86400),
])  # fmt: skip
def test_a_window_is_read_as_max_duration_and_autostop_are(text: str, seconds: float) -> None:
    assert window_seconds(text) == seconds


@pytest.mark.parametrize(("text", "said"), [
    ("soon", "--keep-on-failure soon: a duration is a number of seconds or text like `30m`"),
    ("30x", "--keep-on-failure 30x: a duration is"),
    ("0", "--keep-on-failure 0: a duration must be above zero"),
    ("8d", "--keep-on-failure 8d: longer than a week"),
])  # fmt: skip
def test_a_bad_window_is_one_line_naming_the_flag(text: str, said: str) -> None:
    with pytest.raises(UsageError) as refused:
        window_seconds(text)
    assert refused.value.message.startswith(said), refused.value.message
    assert "--keep-on-failure" in (refused.value.hint or "")


def test_the_flag_wins_over_the_spec_and_none_keeps_nothing() -> None:
    assert keep_window("10m", 7200.0) == 600
    assert keep_window(None, 7200.0) == 7200
    assert keep_window(None, None) is None


@pytest.mark.parametrize(("state", "kept"), [
    ("failed", True), ("lost", True), ("cancelled", False), ("succeeded", False),
    ("timed out", False), ("running", False),
])  # fmt: skip
def test_only_a_failure_keeps_the_hosts(state: str, kept: bool) -> None:
    assert keeps_hosts(state, 1800.0) is kept
    assert keeps_hosts(state, None) is False  # without the flag: as before


def test_the_spec_field_reads_a_duration_and_refuses_a_bad_one(
    gpujob: Callable, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: .\nrun: {entrypoint: train.py}\n"
                    "keep_on_failure: 2h\n")  # fmt: skip
    from launcher.spec.load import load_job_spec

    assert load_job_spec(str(spec)).spec.keep_on_failure == 7200
    spec.write_text(spec.read_text().replace("2h", "sometime"))
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2, result.stderr
    assert "keep_on_failure" in result.stderr and "job.yaml" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr


def test_submit_refuses_the_flag_without_up(gpujob: Callable, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: .\nrun: {entrypoint: train.py}\n")
    result = gpujob("submit", str(spec), "--keep-on-failure", "30m")
    assert result.exit_code == 2, result.stderr
    assert "--keep-on-failure goes with --up" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_keep_on_lambda_without_the_key_opt_in_is_refused_before_renting(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path
) -> None:
    """A kept Lambda host ends itself only with the user's key there: asked for first."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: work\nrun: {entrypoint: train.py}\n")
    result = gpujob("submit", str(spec), "--up", "a100", "--allow-cpu", "--keep-on-failure", "30m")
    assert result.exit_code == 2, result.stderr
    assert "--keep-on-failure on lambda" in result.stderr and "nothing was rented" in result.stderr
    assert "--autostop-key-on-host" in result.stderr
    assert calls(clouds["lambda"], "launch") == [] and lambda_instances(clouds["lambda"]) == []


def test_what_the_user_reads_says_how_to_get_in_and_out_and_the_cost() -> None:
    lines = how_to_look("j-1", 1, "30m", "12:30:00", "$0.65")
    assert lines[0] == (
        "job j-1 failed: its hosts stay up 30m for a look (they end themselves at 12:30:00, "
        "also if this machine is off; the window costs about $0.65)"
    )
    assert "gpujob ssh j-1 --node 1" in lines[1]
    assert lines[2].split() == ["end", "it", "now:", "gpujob", "down", "j-1"]


# -- the host's side: the bound first, then the look ------------------------------------------


class Config:
    @staticmethod
    def write(folder: Path, **extra: object) -> None:
        config = {"idle_s": 600, "action": "terminate", "provider": "lambda",
                  "instance_id": "i-1", "api_url": "http://127.0.0.1:9/api/v1",
                  "key_file": None, **extra}  # fmt: skip
        (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture
def host_folder(tmp_path: Path) -> Iterator[Path]:
    """`~/.gpujob/autostop` as a host has it; its watcher stopped at the end."""
    folder = tmp_path / "home" / ".gpujob" / "autostop"
    folder.mkdir(parents=True)
    for name, source in AUTOSTOP_SOURCES.items():
        (folder / name).write_bytes(Path(source).read_bytes())
    Config.write(folder)
    yield folder
    pid_file = folder / "daemon.pid"
    if pid_file.exists():
        rec = json.loads(pid_file.read_text())
        if start_ticks(rec["pid"]) == rec["start"]:
            os.kill(rec["pid"], signal.SIGTERM)


def test_the_keep_arms_the_watcher_with_the_window_and_a_hard_end_then_looks(
    host_folder: Path, tmp_path: Path
) -> None:
    """A node whose rank 1 still runs (its own process group, as the agent starts a job)
    and that left a core file: the README says both; the watcher reloaded the window."""
    node = tmp_path / "jobs" / "j-1" / "node-0"
    (node / "work").mkdir(parents=True)
    (node / "work" / "core.4242").write_bytes(b"\x7fELF")
    (node / "job.log").write_text("boom\n")
    hung = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (node / "status.json").write_text(json.dumps(
            {"state": "failed", "exit_code": 1, "last_line": "boom", "pid": hung.pid}))  # fmt: skip
        before = time.time()
        done = subprocess.run([sys.executable, str(host_folder / "gpujob-keep.py"), "arm",
                               str(host_folder), "1800", str(node)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        hung.kill()
        hung.wait()
    assert done.returncode == 0, done.stdout + done.stderr
    armed, looked = (json.loads(line) for line in done.stdout.splitlines())
    config = json.loads((host_folder / "config.json").read_text())
    assert config["idle_s"] == 1800 and before + 1800 <= config["until"] <= time.time() + 1800
    assert armed["ok"] and armed["watcher"]["running"] and armed["watcher"]["idle_s"] == 1800
    assert armed["watcher"]["deadline"] <= config["until"]
    (seen,) = looked["nodes"]
    assert seen["cores"] == [str(node / "work" / "core.4242")] and seen["running"] == [hung.pid]
    readme = (node / "kept" / "README.txt").read_text()
    assert "node-0: failed (exit code 1)" in readme and "core.4242" in readme
    assert f"still running: {hung.pid}" in readme and "py-spy" in readme


def test_past_its_hard_end_the_watcher_ends_the_host_even_while_busy(tmp_path: Path) -> None:
    """An SSH session left open on a kept host does not keep it past the window."""
    Config.write(tmp_path, idle_s=1800, until=time.time() - 1)
    watcher = Watcher(tmp_path, looks=lambda _: "a command in an SSH session")
    watcher.load()
    assert watcher.look() is True and watcher.in_use() is None
    Config.write(tmp_path, idle_s=1800, until=time.time() + 600)
    watcher.load()
    assert watcher.look() is False and watcher.in_use() == "a command in an SSH session"


def test_a_keep_rents_hosts_that_have_an_end_from_their_bootstrap_on(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path
) -> None:
    """No `resources.autostop` in the spec: the keep window is the hosts' autostop from the
    rent on, so a Ctrl-C before the keep is armed still leaves every host an end."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: work\nrun: {entrypoint: train.py}\n")
    result = gpujob("submit", str(spec), "--up", "a100", "--allow-cpu", "--autostop-key-on-host",
                    "--keep-on-failure", "45m", "--dry-run")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "would install a watcher on each host that terminates it after 45m" in result.stderr
    assert calls(clouds["lambda"], "launch") == []


def test_a_cancel_with_dump_first_dumps_each_running_rank_then_stops_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follow's stop of the other nodes after a failure, with a keep: each rank still
    running is dumped (a py-spy stand-in on PATH, a real executable that records its argv)
    before the agent's cancel; the ranks are stopped after."""
    from launcher.agent.hung import cancel_args

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    spy = bin_dir / "py-spy"
    spy.write_text('#!/bin/sh\necho "Thread 1 (idle): MainThread"\necho "  args: $*"\n')
    spy.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    node = tmp_path / "node-1"
    node.mkdir()
    hung = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        status = {"state": "running", "pid": hung.pid, "pid_start": start_ticks(hung.pid)}
        (node / "status.json").write_text(json.dumps(status))
        assert cancel_args(node, ["10", "--dump-first"]) == (10.0, False)
    finally:
        hung.kill()
        hung.wait()
    dumped = (node / "kept" / f"py-spy-{hung.pid}.txt").read_text()
    assert f"args: dump --pid {hung.pid}" in dumped and "MainThread" in dumped
    assert cancel_args(node, ["5", "--agent-gone"]) == (5.0, True)  # no dump asked: none taken
    assert [p.name for p in (node / "kept").iterdir()] == [f"py-spy-{hung.pid}.txt"]
