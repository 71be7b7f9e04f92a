"""The resident gpujob through the real console script: the same output and exit codes as a
command run in its own process, signals passed on, and no process left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"), GPUJOB_RESIDENT="1")


def gpujob(env: dict[str, str], *args: str, **kwargs: object) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 120)
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, check=False,
                          **kwargs)  # type: ignore[call-overload]  # fmt: skip


def resident_ready(env: dict[str, str]) -> int:
    """Start the state dir's resident process (any eligible command does) and wait until it
    answers; its pid."""
    gpujob(env, "status")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        folder = _run_dir(env)
        for sock in folder.glob("resident-*.sock") if folder else ():
            with socket.socket(socket.AF_UNIX) as probe, contextlib.suppress(OSError):
                probe.connect(str(sock))
                return int(sock.with_suffix(".pid").read_text())
        time.sleep(0.1)
    raise AssertionError("no resident process started")


def _run_dir(env: dict[str, str]) -> Path | None:
    from launcher.rundir import existing_run_dir

    return existing_run_dir(Path(env["GPUJOB_STATE_DIR"]))


def served_by(pid: int) -> list[int]:
    """The processes the resident process forked for commands (their parent is gone, so by
    their command line and the socket they share)."""
    mine = Path(f"/proc/{pid}/cmdline").read_bytes()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != pid:
            try:
                if (entry / "cmdline").read_bytes() == mine:
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


def test_a_served_command_prints_and_exits_as_one_run_in_its_own_process(
    env: dict[str, str], tmp_path: Path
) -> None:
    resident_ready(env)
    alone = dict(env, GPUJOB_RESIDENT="0")
    spec = str(REPO / "jobs" / "quickstart.yaml")
    dry_run = ("submit", spec, "--dry-run", "--job-id", "same")
    for args in (dry_run, ("logs", "no-such-job"), ("status", "--json")):
        served, own = gpujob(env, *args, cwd=tmp_path), gpujob(alone, *args, cwd=tmp_path)
        assert (served.returncode, served.stdout, served.stderr) == (
            own.returncode, own.stdout, own.stderr
        ), args  # fmt: skip
    assert gpujob(env, "logs", "no-such-job").returncode == 2


def test_the_command_runs_in_the_resident_process_not_the_clients(env: dict[str, str]) -> None:
    """In this process: `hand_over` returns the exit code only when the resident process ran
    the command (None means "run it yourself")."""
    from launcher import resident

    resident_ready(env)
    saved = dict(os.environ)
    try:
        os.environ.update(env)
        assert resident.hand_over(["logs", "no-such-job"]) == 2
        os.environ["GPUJOB_RESIDENT"] = "0"
        assert resident.hand_over(["logs", "no-such-job"]) is None
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_ctrl_c_reaches_a_served_follow_and_a_killed_client_leaves_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    pid = resident_ready(env)
    work = tmp_path / "work"
    work.mkdir()
    (work / "prog.py").write_text("import time\nprint('working', flush=True)\ntime.sleep(120)\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: sleeper\nimage: {REPO / 'images' / 'lab-cpu.yaml'}\nworkdir: work\n"
                    "run:\n  entrypoint: prog.py\n  nproc_per_node: 1\n")  # fmt: skip
    started = gpujob(env, "submit", str(spec), "--detach", "--job-id", "sleeper", timeout=600)
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    try:
        for sig, code in ((signal.SIGINT, 130), (signal.SIGKILL, -9)):
            follow = subprocess.Popen([GPUJOB, "logs", "sleeper", "-f"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
            assert follow.stdout is not None
            if sig == signal.SIGINT:  # the first follow shows the log from its start
                while b"working" not in follow.stdout.readline():
                    pass
            _wait_until(lambda: len(served_by(pid)) == 1)  # a child follows for the client
            follow.send_signal(sig)
            _, err = follow.communicate(timeout=60)
            assert follow.returncode == code, err
            if sig == signal.SIGINT:
                assert b"stopped following; the job goes on" in err
            _wait_until(lambda: served_by(pid) == [])  # the child ended with its client
        assert b'"state": "running"' in gpujob(env, "status", "--json").stdout
    finally:
        gpujob(env, "cancel", "sleeper", "--grace", "1")


def _wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
