"""Real jobs on this machine through the real CLI: spec -> plan -> agent -> torchrun.

The quickstart trains for real (2 gloo ranks); the other jobs are tiny programs run through
the same path to check what users check: exit codes, cancel, lost agents, logs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
IMAGE = str(REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml")


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    """A private state dir per test; the job environment cache is shared (content-addressed)."""
    return dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))


def gpujob(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GPUJOB, *args], env=env, capture_output=True, timeout=timeout, check=False
    )


def status_of(env: dict[str, str], job_id: str) -> dict:
    result = gpujob(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    return next(row for row in json.loads(result.stdout)["jobs"] if row["id"] == job_id)


def write_job(folder: Path, program: str, **extra: str) -> Path:
    """A one-rank job running `program` (Python source) through torchrun."""
    workdir = folder / "work"
    workdir.mkdir(parents=True)
    (workdir / "prog.py").write_text(program)
    lines = [
        "name: tiny",
        f"image: {IMAGE}",
        "workdir: work",
        "run:",
        "  entrypoint: prog.py",
        "  nproc_per_node: 1",
        *(f"{key}: {value}" for key, value in extra.items()),
    ]
    spec = folder / "job.yaml"
    spec.write_text("\n".join(lines) + "\n")
    return spec


def test_quickstart_trains_and_streams_its_log_byte_for_byte(state: dict[str, str]) -> None:
    result = gpujob(state, "submit", "jobs/quickstart.yaml", "--job-id", "qs-e2e")
    stdout = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()[-3000:]

    job_dir = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / "qs-e2e"
    raw = (job_dir / "node-0" / "job.log").read_bytes()
    # The host's log keeps every byte, and the stream (a pipe here, not a terminal) is that
    # log byte for byte, written as read (`\r` progress bars as well: test_log_streams.py).
    assert result.stdout == raw

    losses = [float(x) for x in re.findall(r"^step \d+/\d+ loss ([0-9.]+)", stdout, re.M)]
    assert len(losses) >= 5 and losses[-1] < losses[0] * 0.5, losses
    assert re.search(r"^final loss [0-9.]+$", stdout, re.M)
    for rank in (0, 1):
        assert f"rank {rank}/2: ready" in stdout and f"rank {rank}/2: done" in stdout

    checkpoints = sorted(p.name for p in (job_dir / "checkpoints").iterdir())
    assert checkpoints == ["checkpoint-40", "checkpoint-60"]  # every 20 steps, keep_last 2
    for name in checkpoints:
        state_file = json.loads((job_dir / "checkpoints" / name / "trainer_state.json").read_text())
        assert state_file["global_step"] == int(name.split("-")[1])
        assert (job_dir / "checkpoints" / name / "model.safetensors").stat().st_size > 0

    row = status_of(state, "qs-e2e")
    assert (row["state"], row["exit_code"]) == ("succeeded", 0)
    assert row["last_line"].startswith("rank ") or row["last_line"].startswith("final loss")

    again = gpujob(state, "logs", "qs-e2e")
    assert again.returncode == 0 and again.stdout == result.stdout
    tail = gpujob(state, "logs", "qs-e2e", "--tail", "3")
    assert tail.stdout.decode().splitlines() == stdout.splitlines()[-3:]


def test_a_failing_job_exits_non_zero_with_its_error_in_the_log(
    tmp_path: Path, state: dict[str, str]
) -> None:
    spec = write_job(tmp_path, "print('about to fail', flush=True)\nraise SystemExit(3)\n")
    result = gpujob(state, "submit", str(spec), "--job-id", "fails")
    assert result.returncode == 1  # torchrun's own exit status for a failed worker
    assert b"about to fail" in result.stdout
    assert b"ChildFailedError" in result.stdout or b"exitcode" in result.stdout
    assert status_of(state, "fails")["state"] == "failed"


FILL_THE_DISK = """\
import sys, time
print("filling the disk", flush=True)
try:
    with open("filler", "wb") as out:
        while True:
            out.write(b"x" * 65536)
            out.flush()
except OSError as err:
    print(err, flush=True)
time.sleep(6)  # past the agent's 5 s memory sample: its write meets the full disk too
sys.exit(CODE)
"""


@pytest.mark.parametrize(("code", "ended"), [(1, "failed"), (0, "succeeded")])
def test_a_job_that_fills_its_disk_ends_recorded(
    tmp_path: Path, state: dict[str, str], small_disk, code: int, ended: str
) -> None:
    """The job folder on a 4 MB disk that the job fills, then ends: its node records the
    end anyway (it used to die on ENOSPC and read `running`, then `lost`); a failed end
    names the full disk, in `status` too."""
    spec = write_job(tmp_path, FILL_THE_DISK.replace("CODE", str(code)))
    disk = small_disk("4m", at=Path(state["GPUJOB_STATE_DIR"]) / "jobs" / "fills")
    result = gpujob(state, "submit", str(spec), "--job-id", "fills")
    assert result.returncode == code, result.stderr.decode()[-2000:]
    assert b"No space left on device" in result.stdout
    filler = next(disk.rglob("filler"))  # left there: the end was recorded on a full disk
    assert filler.stat().st_size > 3 << 20
    node = json.loads((disk / "node-0" / "status.json").read_text())
    row = status_of(state, "fills")
    assert (node["state"], row["state"], row["exit_code"]) == (ended, ended, code), node
    full = f"the disk of {disk / 'node-0'} is full (0 KiB free of 4 MiB)"
    if ended == "failed":
        assert node["reason"].startswith(full) and row["warning"].startswith(full), row
        assert f"job fills failed: {full}" in result.stderr.decode()
        table = gpujob(state, "status").stdout.decode()
        assert re.search(r"^fills +failed +1 .*the disk of ", table, re.M), table
    else:
        assert "reason" not in node and row["warning"] == "", row


def test_cancel_stops_every_process_of_the_job(tmp_path: Path, state: dict[str, str]) -> None:
    program = "import time\nprint('working', flush=True)\ntime.sleep(600)\n"
    spec = write_job(tmp_path, program)
    started = gpujob(state, "submit", str(spec), "--detach", "--job-id", "sleeper")
    assert started.returncode == 0, started.stderr
    node_dir = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / "sleeper" / "node-0"
    wait_for(lambda: b"working" in (node_dir / "job.log").read_bytes())
    pid = json.loads((node_dir / "status.json").read_text())["pid"]
    tree = [pid, *descendants(pid)]

    cancelled = gpujob(state, "cancel", "sleeper", "--grace", "5")
    assert cancelled.returncode == 0, cancelled.stderr
    assert status_of(state, "sleeper")["state"] == "cancelled"
    assert not [p for p in tree if alive(p)]


def start_and_kill_everything(tmp_path: Path, state: dict[str, str], job_id: str) -> None:
    """A one-node job that prints `up` and sleeps, then its supervisor, its program and
    everything under it killed: what a host reboot or the OOM killer leaves."""
    spec = write_job(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    assert gpujob(state, "submit", str(spec), "--detach", "--job-id", job_id).returncode == 0
    node_dir = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / job_id / "node-0"
    wait_for(lambda: b"up" in (node_dir / "job.log").read_bytes())
    status = json.loads((node_dir / "status.json").read_text())
    for pid in [status["supervisor_pid"], status["pid"], *descendants(status["pid"])]:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(status["supervisor_pid"]))


def test_status_says_lost_when_the_agent_and_job_are_killed(
    tmp_path: Path, state: dict[str, str]
) -> None:
    """A host that reboots mid-job: status must say lost, not running."""
    start_and_kill_everything(tmp_path, state, "lost")
    assert status_of(state, "lost")["state"] == "lost"


def test_a_cancel_of_a_lost_job_under_recovery_is_the_users_word(
    tmp_path: Path, state: dict[str, str]
) -> None:
    """A recovery controller restarts a job whose node reads `lost`: a user's cancel in
    between must be recorded `cancelled` (the controller's word to make no restart and end
    the hosts), not `lost` as an ended node's answer would record it."""
    start_and_kill_everything(tmp_path, state, "rec")
    script = "from launcher.state.recovery import RecoveryDB; RecoveryDB().add('rec', {}, 2)"
    done = subprocess.run([sys.executable, "-c", script], env=state, check=False,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = gpujob(state, "cancel", "rec")
    assert result.returncode == 0, result.stderr
    assert b"makes no restart" in result.stderr
    assert status_of(state, "rec")["state"] == "cancelled"


def test_cancel_stops_the_job_after_its_agent_was_killed(
    tmp_path: Path, state: dict[str, str], request: pytest.FixtureRequest
) -> None:
    """What an OOM killer does to the supervisor: the job's processes run on, status says
    so, and cancel stops every one of them and records the end."""
    program = ("import subprocess, sys, time\n"  # a child in a session of its own, as
               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
               " start_new_session=True)\n"  # torchrun's workers are
               "print('working', flush=True)\ntime.sleep(600)\n")  # fmt: skip
    spec = write_job(tmp_path, program)
    assert gpujob(state, "submit", str(spec), "--detach", "--job-id", "orphan").returncode == 0
    job_dir = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / "orphan"
    node_dir = job_dir / "node-0"
    wait_for(lambda: b"working" in (node_dir / "job.log").read_bytes())
    status = json.loads((node_dir / "status.json").read_text())
    os.kill(status["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: not alive(status["supervisor_pid"]))
    before = job_processes(status["pid"], job_dir)
    request.addfinalizer(lambda: [os.kill(p, signal.SIGKILL) for p in job_processes(
        status["pid"], job_dir)])  # fmt: skip
    assert len(before) >= 3, before  # torchrun (run.sh exec'd it), its worker, the child

    row = status_of(state, "orphan")
    assert row["state"] == "lost"
    assert f"still run (pgid {status['pid']})" in row["last_line"], row
    assert "gpujob cancel stops them" in row["last_line"]
    assert job_processes(status["pid"], job_dir) == before

    cancelled = gpujob(state, "cancel", "orphan", "--grace", "3")
    assert cancelled.returncode == 0, cancelled.stderr
    assert b"cancelled on 1 node(s)" in cancelled.stderr
    assert job_processes(status["pid"], job_dir) == []
    row = status_of(state, "orphan")
    assert row["state"] == "cancelled"
    recorded = json.loads((node_dir / "status.json").read_text())
    assert recorded["reason"].startswith("cancelled after the agent died")
    assert "cancel: the agent is gone" in (node_dir / "job.log").read_text()


def test_cancel_stops_a_worker_whose_torchrun_was_killed_too(
    tmp_path: Path, state: dict[str, str], request: pytest.FixtureRequest
) -> None:
    """The OOM killer takes the supervisor, torchrun and its worker; a process the worker
    started in a session of its own is init's now, in no group of the job's: status still
    names it, and cancel stops it."""
    program = ("import pathlib, subprocess, sys, time\n"
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
               " start_new_session=True)\n"
               "pathlib.Path('child.pid').write_text(str(child.pid))\n"
               "print('working', flush=True)\ntime.sleep(600)\n")  # fmt: skip
    spec = write_job(tmp_path, program)
    assert gpujob(state, "submit", str(spec), "--detach", "--job-id", "stray").returncode == 0
    node_dir = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / "stray" / "node-0"
    wait_for(lambda: b"working" in (node_dir / "job.log").read_bytes())
    child_file = next((node_dir.parent).rglob("child.pid"))
    child = int(child_file.read_text())
    request.addfinalizer(lambda: alive(child) and os.kill(child, signal.SIGKILL))
    status = json.loads((node_dir / "status.json").read_text())
    for pid in [status["supervisor_pid"], status["pid"], *descendants(status["pid"])]:
        if pid != child:
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(status["supervisor_pid"]) and not alive(status["pid"]))
    assert alive(child)

    row = status_of(state, "stray")
    assert row["state"] == "lost"
    assert f"still run (pid {child})" in row["last_line"], row

    cancelled = gpujob(state, "cancel", "stray", "--grace", "2")
    assert cancelled.returncode == 0, cancelled.stderr
    assert b"cancelled on 1 node(s)" in cancelled.stderr
    assert not alive(child)
    assert status_of(state, "stray")["state"] == "cancelled"


def test_cancel_of_a_job_that_succeeded_changes_nothing(
    tmp_path: Path, state: dict[str, str]
) -> None:
    spec = write_job(tmp_path, "print('done', flush=True)\n")
    assert gpujob(state, "submit", str(spec), "--job-id", "done").returncode == 0
    node_status = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / "done" / "node-0" / "status.json"
    recorded = node_status.read_bytes()
    for _ in range(2):  # asked again, the same answer
        cancelled = gpujob(state, "cancel", "done")
        assert cancelled.returncode == 0, cancelled.stderr
        assert b"job done had already ended (succeeded); nothing to cancel" in cancelled.stderr
        assert (status_of(state, "done")["state"], status_of(state, "done")["exit_code"]) == (
            "succeeded", 0)  # fmt: skip
    assert node_status.read_bytes() == recorded
    assert not (node_status.parent / "cancel-requested").exists()


def test_a_secret_reaches_the_job_but_no_file_or_log(tmp_path: Path, state: dict[str, str]) -> None:
    program = "import os\nprint('token length', len(os.environ['GJ_E2E_TOKEN']), flush=True)\n"
    spec = write_job(tmp_path, program, secrets="[GJ_E2E_TOKEN]")
    value = "s3cr3t-value-9b1f"
    result = gpujob(dict(state, GJ_E2E_TOKEN=value), "submit", str(spec), "--job-id", "secret")
    assert result.returncode == 0, result.stderr
    assert f"token length {len(value)}".encode() in result.stdout
    job_dir = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / "secret"
    for path in job_dir.rglob("*"):
        if path.is_file():
            assert value.encode() not in path.read_bytes(), path
    assert not (job_dir / "node-0" / "secrets.json").exists()


def wait_for(condition, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except FileNotFoundError:
            pass
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def descendants(pid: int) -> list[int]:
    result = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True)
    children = [int(x) for x in result.stdout.split()]
    return children + [d for child in children for d in descendants(child)]


def job_processes(group: int, job_dir: Path) -> list[int]:
    """Processes of the job, by what a user would look for: its process group, its job
    folder in a command line, or a working directory inside it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        if int(fields[2]) == group or str(job_dir) in cmdline or cwd.startswith(str(job_dir)):
            found.append(int(entry.name))
    return sorted(found)
