"""Autostop's pure parts and its refusals, with no network: what keeps a host busy (a hold,
a folder of status files, a snapshot of processes), the call each cloud gets, the files a
host gets, what `status` says, a job's agent seen while its start is slow, and what
`up`/`submit --up` refuse before anything is rented (against the fakes on a thread: their
request logs show no call). The watcher's decision loop against the fakes is in
test_autostop_watcher.py."""

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

from infra.fakes import LAMBDA_API_KEY, RunningFake
from launcher.agent.agent_os import start_ticks
from launcher.agent.autostop_busy import Proc, hold_busy, job_busy, session_busy
from launcher.agent.autostop_call import request_for
from launcher.bootstrap.autostop import AutostopSetup, config_of, install_ops
from launcher.clouds.base import AutostopCall
from launcher.remote.batch import File, Run
from launcher.targets.cloud.autostop import autostop_text

# -- busy: jobs ------------------------------------------------------------------------------


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def node(root: Path, job: str, status: dict) -> None:
    folder = root / job / "node-0"
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps(status))


ME = os.getpid()


@pytest.mark.parametrize(("status", "busy"), [
    ({"state": "running", "supervisor_pid": ME, "supervisor_start": start_ticks(ME)},
     "job j node-0 running"),
    ({"state": "running", "supervisor_pid": ME, "supervisor_start": -1}, None),  # recycled pid
    ({"state": "running", "supervisor_pid": "DEAD"}, None),  # a supervisor that died: lost
    ({"state": "succeeded", "supervisor_pid": "DEAD", "exit_code": 0}, None),
    ({"state": "starting", "requested_at": "NOW"}, "job j node-0 starting"),
    ({"state": "starting", "requested_at": "AN HOUR AGO"}, None),
    # ended, but its supervisor still ships the last checkpoint and log
    ({"state": "succeeded", "supervisor_pid": ME, "supervisor_start": start_ticks(ME)},
     "job j node-0 succeeded"),
], ids=["running", "recycled-pid", "supervisor-gone", "ended", "starting", "start-abandoned",
        "ended-still-shipping"])  # fmt: skip
def test_a_job_keeps_the_host_busy_while_its_supervisor_lives(
    tmp_path: Path, status: dict, busy: str | None
) -> None:
    now = time.time()
    values = {"DEAD": dead_pid(), "NOW": now - 1, "AN HOUR AGO": now - 3600}
    node(tmp_path, "j", {k: values.get(v, v) if isinstance(v, str) else v
                         for k, v in status.items()})  # fmt: skip
    assert job_busy(tmp_path, now) == busy


def test_no_jobs_folder_is_idle(tmp_path: Path) -> None:
    assert job_busy(tmp_path / "jobs") is None


# -- busy: the renting command's hold --------------------------------------------------------


@pytest.mark.parametrize(("content", "age_s", "busy"), [
    (None, 0, None),  # no hold: handed over, or never held
    ('{"seconds": 600, "by": "gpujob up"}', 0, "held by gpujob up until"),
    ('{"seconds": 600, "by": "gpujob submit --up"}', 599, "held by gpujob submit --up until"),
    ('{"seconds": 600, "by": "gpujob up"}', 601, None),  # the command died: it expired
    ("not json", 0, None),  # unreadable: no hold, so the host is never left without an end
], ids=["none", "fresh", "nearly-expired", "expired", "unreadable"])  # fmt: skip
def test_a_hold_keeps_the_host_busy_until_it_expires(
    tmp_path: Path, content: str | None, age_s: float, busy: str | None
) -> None:
    now = time.time()
    if content is not None:
        (tmp_path / "hold").write_text(content)
        os.utime(tmp_path / "hold", (now - age_s, now - age_s))  # written age_s ago
    said = hold_busy(tmp_path, now)
    assert said == busy if busy is None else said is not None and said.startswith(busy)


def test_a_supervisor_is_seen_while_a_slow_start_runs(tmp_path: Path) -> None:
    """A `docker run` that takes long to return (a pull): the node's supervisor is in its
    status (alive, `starting`) before the start returns, so the host is busy past the 30 s
    grace of a start asked for; `status_of` still says `starting`."""
    from launcher.agent import AGENT_SOURCE

    node_dir = tmp_path / "jobs" / "j" / "node-0"
    node_dir.mkdir(parents=True)
    gate = tmp_path / "go"
    wait = (
        f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.02)\n"
        "raise SystemExit(1)"
    )  # a `docker run` that returns once let go, failed
    (node_dir / "job.json").write_text(json.dumps({
        "job_id": "j", "node_rank": 0, "runtime": "docker", "log": "job.log",
        "argv": [sys.executable, "-c", wait]}))  # fmt: skip
    starting = subprocess.Popen([sys.executable, str(AGENT_SOURCE), "start", str(node_dir)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "supervisor_pid" not in _status(node_dir) and time.monotonic() < deadline:
            time.sleep(0.02)
        status = _status(node_dir)
        assert status["state"] == "starting" and status["supervisor_pid"] != starting.pid, status
        later = time.time() + 60  # past the grace of a start that was only asked for
        assert job_busy(tmp_path / "jobs", later) == "job j node-0 starting"
        shown = subprocess.run([sys.executable, str(AGENT_SOURCE), "status", str(node_dir)],
                               capture_output=True, text=True, check=True)  # fmt: skip
        assert json.loads(shown.stdout)["state"] == "starting"
    finally:
        gate.touch()
        out, err = starting.communicate(timeout=30)
    assert starting.returncode == 1 and json.loads(out)["state"] == "failed", (out, err)


def _status(node_dir: Path) -> dict:
    try:
        return json.loads((node_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


# -- busy: SSH sessions ----------------------------------------------------------------------

HERE, ELSEWHERE = "net:[4026531840]", "net:[4026532999]"
LISTENER = Proc(10, 1, "sshd", "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups", None)
MASTER = Proc(20, 10, "sshd", "sshd: root@notty", None)


@pytest.mark.parametrize(("procs", "busy"), [
    ([LISTENER, MASTER], None),  # an idle ControlMaster connection runs nothing
    ([LISTENER, MASTER, Proc(30, 20, "sleep", "sleep 600", HERE)],
     "SSH session root@notty: sleep 600"),
    ([LISTENER, Proc(21, 10, "sshd", "sshd: root@pts/0", None),
      Proc(31, 21, "bash", "-bash", HERE)], "SSH session root@pts/0: -bash"),
    ([LISTENER, Proc(22, 10, "sshd-session", "sshd-session: ubuntu@notty", None),
      Proc(32, 22, "python3", "python3 -c x", HERE)], "SSH session ubuntu@notty: python3 -c x"),
    ([LISTENER, MASTER, Proc(30, 20, "sleep", "sleep 600", ELSEWHERE)], None),  # another host
    ([LISTENER, MASTER, Proc(30, 20, "sleep", "sleep 600", None)],  # unreadable: counted
     "SSH session root@notty: sleep 600"),
    ([LISTENER, MASTER, Proc(30, 20, "cat", "cat .gpujob/autostop/state.json", HERE)], None),
    ([LISTENER, Proc(23, 10, "sshd", "sshd: root [priv]", None),
      Proc(20, 23, "sshd", "sshd: root@notty", None)], None),
    ([Proc(40, 1, "python3", "python3 train.py", HERE)], None),  # nohup'd: outlived its session
], ids=["idle-master", "command", "login", "sshd-session", "other-netns", "netns-unreadable",
        "status-read", "privsep-monitor", "orphan"])  # fmt: skip
def test_a_command_or_login_in_an_ssh_session_keeps_the_host_busy(
    procs: list[Proc], busy: str | None
) -> None:
    assert session_busy(procs, HERE, ".gpujob/autostop/") == busy


# -- the call and the files ------------------------------------------------------------------

KEY = "secret_lab-key_0f1e2d3c4b5a6978"
LAMBDA = AutostopCall("lambda", "http://10.77.0.1:8001/api/v1", "i-1", "terminate", key=KEY)


@pytest.mark.parametrize(("call", "expected"), [
    (LAMBDA, ("POST", "http://10.77.0.1:8001/api/v1/instance-operations/terminate",
              {"instance_ids": ["i-1"]})),
    (AutostopCall("vast", "http://h/api/v0/", "42", "terminate"),
     ("DELETE", "http://h/api/v0/instances/42/", {})),
    (AutostopCall("vast", "http://h/api/v0", "42", "stop"),
     ("PUT", "http://h/api/v0/instances/42/", {"state": "stopped"})),
], ids=["lambda-terminate", "vast-destroy", "vast-stop"])  # fmt: skip
def test_each_cloud_gets_its_own_call(call: AutostopCall, expected: tuple) -> None:
    assert request_for(config_of(AutostopSetup(60, call), "/root")) == expected


def test_the_lambda_key_goes_only_into_its_own_0600_file() -> None:
    ops = install_ops(AutostopSetup(1800, LAMBDA, hold_s=1800), "/home/ubuntu")
    files = {op.path: op for op in ops if isinstance(op, File)}
    where = "/home/ubuntu/.gpujob/autostop"
    assert set(files) == {f"{where}/gpujob-autostop.py", f"{where}/autostop_call.py",
                          f"{where}/autostop_busy.py", f"{where}/agent_os.py",
                          f"{where}/gpujob-keep.py", f"{where}/hung.py",
                          f"{where}/config.json", f"{where}/api-key",
                          f"{where}/hold"}  # fmt: skip
    assert (files[f"{where}/api-key"].content, files[f"{where}/api-key"].mode) == (
        KEY.encode() + b"\n", 0o600)  # fmt: skip
    config = json.loads(files[f"{where}/config.json"].content)
    assert files[f"{where}/config.json"].mode == 0o600
    assert config == {"idle_s": 1800, "action": "terminate", "provider": "lambda",
                      "instance_id": "i-1", "api_url": "http://10.77.0.1:8001/api/v1",
                      "key_file": f"{where}/api-key"}  # fmt: skip
    carrying = [path for path, f in files.items() if KEY.encode() in f.content]  # whole files
    assert carrying == [f"{where}/api-key"]
    assert ops[-1] == Run(("python3", f"{where}/gpujob-autostop.py", "start", where))
    assert all(KEY not in arg for op in ops if isinstance(op, Run) for arg in op.argv)
    assert KEY not in repr(LAMBDA) and KEY not in repr(ops)  # never printed either


def test_the_hold_goes_there_before_the_watcher_starts() -> None:
    ops = install_ops(AutostopSetup(600, LAMBDA, hold_s=1800, held_by="gpujob submit --up"),
                      "/root")  # fmt: skip
    (at,) = [i for i, op in enumerate(ops) if isinstance(op, File) and op.path.endswith("/hold")]
    after = ops[at + 1 :]  # the dry call, then the start: nothing starts that cannot end the host
    assert [op.argv[-2] for op in after if isinstance(op, Run)] == ["check", "start"]
    assert len(after) == 2
    assert ops[at].mode == 0o600
    assert json.loads(ops[at].content) == {"seconds": 1800, "by": "gpujob submit --up"}


def test_a_vast_host_uses_its_own_instance_key() -> None:
    ops = install_ops(AutostopSetup(600, AutostopCall("vast", "u", "42", "stop")), "/root")
    paths = [op.path for op in ops if isinstance(op, File)]
    assert not any(p.endswith("api-key") for p in paths)
    config = json.loads(next(op.content for op in ops if isinstance(op, File)
                             and op.path.endswith("config.json")))  # fmt: skip
    assert (config["key_file"], config["action"]) == ("/root/.gpujob/autostop/instance-key",
                                                      "stop")  # fmt: skip


def test_the_vast_onstart_keeps_the_instance_key_out_of_etc_environment(tmp_path: Path) -> None:
    """The onstart as a shell runs it, with a container's variables: the key lands in its
    0600 file only; /etc/environment (here a file of the test's) gets the rest."""
    from launcher.clouds.vast import ONSTART

    etc = tmp_path / "environment"
    script = ONSTART.replace("/etc/environment", str(etc))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CONTAINER_API_KEY": "k" * 64,
           "CONTAINER_ID": "42", "PUBLIC_IPADDR": "192.0.2.1"}  # fmt: skip
    subprocess.run(["sh", "-c", script], env=env, check=True, timeout=30)
    key_file = tmp_path / ".gpujob" / "autostop" / "instance-key"
    assert key_file.read_text() == "k" * 64 + "\n"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert "k" * 64 not in etc.read_text() and "CONTAINER_ID=42" in etc.read_text()


# -- what status says ------------------------------------------------------------------------

RECORDED = {"idle_s": 1800, "action": "terminate", "since": 0.0}


@pytest.mark.parametrize(("state", "said"), [
    ({}, "30m idle -> terminate; idle since unknown (not connected)"),
    ({"busy": "job j node-0 running", "deadline": None}, "30m idle -> terminate; busy: job j"),
    ({"busy": None, "checked_at": 1000.0, "deadline": 1600.0}, "in 10m)"),
    ({"state": "retrying"}, "30m idle -> terminate; ending now (retrying)"),
    ({"busy": "held by gpujob up until 12:00:00"}, "busy: held by gpujob up until 12:00:00"),
], ids=["not-connected", "busy", "deadline", "ending", "held"])  # fmt: skip
def test_status_says_the_window_and_what_the_host_said(state: dict, said: str) -> None:
    assert said in autostop_text(RECORDED, state, 1000.0)


# -- the watcher as a process: one per host, a second start reloads it -----------------------


@pytest.fixture
def watcher_folder(tmp_path: Path) -> Iterator[Path]:
    from launcher.agent import AUTOSTOP_SOURCES

    folder = tmp_path / "home" / ".gpujob" / "autostop"
    folder.mkdir(parents=True)
    for name, source in AUTOSTOP_SOURCES.items():
        (folder / name).write_bytes(Path(source).read_bytes())
    yield folder
    pid = json.loads((folder / "daemon.pid").read_text())["pid"] if (
        folder / "daemon.pid").exists() else None  # fmt: skip
    if pid and start_ticks(pid) == json.loads((folder / "daemon.pid").read_text())["start"]:
        os.kill(pid, signal.SIGTERM)


def start(folder: Path, idle_s: float, api_url: str = "http://127.0.0.1:9/api/v1",
          code: int = 0, env: dict[str, str] | None = None) -> dict:  # fmt: skip
    """Nothing listens on the API URL: were the watcher to call, it would only retry."""
    config = {"idle_s": idle_s, "action": "terminate", "provider": "lambda",
              "instance_id": "i-1", "api_url": api_url, "key_file": None}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    done = subprocess.run([sys.executable, str(folder / "gpujob-autostop.py"), "start",
                           str(folder)], capture_output=True, text=True, timeout=60,
                          env=env)  # fmt: skip
    assert done.returncode == code, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_second_start_reloads_the_one_watcher(watcher_folder: Path) -> None:
    first = start(watcher_folder, 3600)
    second = start(watcher_folder, 7200)
    assert first["pid"] == second["pid"] and second["running"]
    assert (second["idle_s"], second["config"]["idle_s"]) == (7200, 7200)
    assert oct(watcher_folder.stat().st_mode & 0o777) == "0o700"
    log = (watcher_folder.parent / "autostop.log").read_text()
    assert log.count("watching: after") == 2, log


def test_the_watcher_keeps_nothing_of_the_environment_that_started_it(
    watcher_folder: Path,
) -> None:
    """Started from a session holding a secret (as a Vast SSH session held the container's
    variables): the watcher's own environment is PATH alone."""
    secret = "CONTAINER_API_KEY=" + "5" * 64
    started = start(watcher_folder, 3600, env={**os.environ, "CONTAINER_API_KEY": "5" * 64})
    environ = Path(f"/proc/{started['pid']}/environ").read_bytes().split(b"\0")
    assert [v.split(b"=")[0] for v in environ if v] == [b"PATH"]
    assert secret.encode() not in b"\0".join(environ)


@pytest.mark.parametrize("url", ["10.77.0.1:8001/api/v1", "ftp://h/api", "http:///api/v1"])
def test_the_watcher_refuses_an_api_url_it_could_never_call(watcher_folder: Path, url: str) -> None:
    said = start(watcher_folder, 60, api_url=url, code=1)
    assert "api_url" in said["error"] and "not an http:// or https:// URL" in said["error"]
    assert not (watcher_folder / "daemon.pid").exists()  # nothing started


# -- refusals before anything is rented ------------------------------------------------------


@pytest.mark.parametrize(("args", "said"), [
    (("up", "a100", "--autostop", "30m", "-y"), "add --autostop-key-on-host"),
    (("up", "a100", "--autostop", "soon", "-y"), "--autostop soon: a duration is"),
    (("up", "a100", "--autostop-stop", "-y"), "--autostop-stop goes with an autostop window"),
    (("up", "a100", "--autostop", "30m", "--autostop-key-on-host", "--no-bootstrap", "-y"),
     "--no-bootstrap skips it"),
    (("up", "--host", "root@192.0.2.7", "--autostop", "30m"), "no cloud API that could end it"),
    (("up", "--host", "root@192.0.2.7", "--autostop-stop"), "--autostop-stop is for hosts"),
    (("up", "--host", "root@192.0.2.7", "--autostop-key-on-host"),
     "--autostop-key-on-host is for hosts gpujob rents"),
    (("up", "--host", "root@192.0.2.7", "--max-cost", "5"), "--max-cost is for hosts gpujob"),
], ids=["no-opt-in", "bad-duration", "stop-alone", "no-bootstrap", "static-host",
        "static-stop", "static-key", "static-cost"])  # fmt: skip
def test_up_refuses_what_autostop_cannot_do_before_any_cloud_call(
    clouds: dict[str, RunningFake], gpujob: Callable, args: tuple[str, ...], said: str
) -> None:
    result = gpujob(*args)
    assert result.exit_code == 2, result.stderr
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert clouds["lambda"].control.requests() == []  # not one call, let alone a launch


@pytest.mark.parametrize(("provider", "variable"), [
    ("lambda", "GPUJOB_LAMBDA_HOST_API_URL"), ("vast", "GPUJOB_VAST_HOST_API_URL"),
])  # fmt: skip
def test_up_refuses_a_host_api_url_without_a_scheme_before_any_cloud_call(
    clouds: dict[str, RunningFake], gpujob: Callable, monkeypatch: pytest.MonkeyPatch,
    provider: str, variable: str,
) -> None:  # fmt: skip
    """urllib on the host takes no URL without its scheme: the watcher would fail every call
    and the host would bill for ever."""
    monkeypatch.setenv(variable, "10.77.0.1:8001/api")
    result = gpujob("up", "a100", "--provider", provider, "--autostop", "30m",
                    "--autostop-key-on-host", "-y")  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert "'10.77.0.1:8001/api' is not an http:// or https:// URL" in result.stderr
    assert variable in result.stderr and "nothing was rented" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert clouds[provider].control.requests() == []


def test_submit_refuses_the_key_opt_in_without_up(gpujob: Callable, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: .\nrun: {entrypoint: train.py}\n")
    result = gpujob("submit", str(spec), "--autostop-key-on-host")
    assert result.exit_code == 2, result.stderr
    assert "--autostop-key-on-host goes with --up" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_submit_up_refuses_a_spec_autostop_on_lambda_without_the_opt_in(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: work\nrun: {entrypoint: train.py}\n"
                    "resources: {autostop: {idle_minutes: 30}}\n")  # fmt: skip
    result = gpujob("submit", str(spec), "--up", "a100", "--allow-cpu")
    assert result.exit_code == 2, result.stderr
    assert "nothing was rented" in result.stderr and "--autostop-key-on-host" in result.stderr
    assert calls(clouds["lambda"], "launch") == [] and lambda_instances(clouds["lambda"]) == []


def test_up_dry_run_says_how_autostop_would_be_installed_and_where_the_key_goes(
    clouds: dict[str, RunningFake], gpujob: Callable
) -> None:
    result = gpujob("up", "a100", "--autostop", "30m", "--autostop-key-on-host", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "dry run: would install a watcher on each host that terminates it after 30m" in (
        result.stderr)  # fmt: skip
    assert "LAMBDA_API_KEY would be written to ~/.gpujob/autostop/api-key" in result.stderr
    assert "mode 0600" in result.stderr and LAMBDA_API_KEY not in result.stderr + result.stdout
    assert calls(clouds["lambda"], "launch") == []
