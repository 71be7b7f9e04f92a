"""`gpujob logs` against real local jobs: it writes as it reads, in bounded memory, whatever
the line length (a 100 MB `\\r` progress line into a pipe); `nohup` keeps it following
through a hang-up; a signal ends it with 128 + its number; the job's control bytes reach a
terminal escaped and a pipe as they are; job.log is not executable."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_local_jobs import GPUJOB, gpujob, wait_for

pytestmark = pytest.mark.e2e

PEAK_RSS = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "sys.stderr.write(f'peak-rss-kib {peak}\\n')\n"
    "sys.exit(code)\n"
)
"""Runs a command and says its peak RSS. From a small parent: a child forked from pytest
counts pytest's own pages (100 MB late in the suite) in its peak until it execs."""
PROGRESS = """\
import os, sys, time
out = sys.stdout.buffer
bar = b"\\r" + b"progress " + b"#" * 90
for half in range(2):
    for _ in range(500_000):  # 50 MB of one line, rewritten with \\r
        out.write(bar)
    out.flush()
    while half == 0 and not os.path.exists("go"):  # the reader must have seen bytes by now
        time.sleep(0.05)
out.write(b"\\ndone\\n")
"""

TICKS = """\
import os, time
n = 0
while not os.path.exists("stop"):
    print("tick", n, flush=True)
    n += 1
    time.sleep(0.2)
"""

CONTROL = (
    b"title \x1b]0;pwned\x07 here\n"
    b"\x1b[31mred\x1b[0m plain\n"
    b"clear \x1b[2J screen\n"
    b"nul \x00 bell \x07 end\n"
    b"csi \xc2\x9b2J one-byte \x9b31m kept \xc3\xa9\n"  # C1's CSI as UTF-8, and as a byte
    b"bar 10%\rbar 100%\n"
)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A private state dir; a job a failed test left running is cancelled after it."""
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    yield env
    listed = gpujob(env, "status", "--json")
    for row in json.loads(listed.stdout or b"{}").get("jobs", []):
        if row.get("state") not in ("succeeded", "failed", "cancelled"):
            gpujob(env, "cancel", row["id"])


def start(tmp_path: Path, state: dict[str, str], job_id: str, program: str) -> Path:
    """A detached one-node job running `program` with the host's Python; its job folder."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "prog.py").write_text(program)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: streams\nimage: host\nworkdir: work\n"
                    "run: {entrypoint: prog.py, launcher: none}\n")  # fmt: skip
    started = gpujob(state, "submit", str(spec), "--detach", "--job-id", job_id)
    assert started.returncode == 0, started.stderr.decode()
    return Path(state["GPUJOB_STATE_DIR"]) / "jobs" / job_id


def test_a_100mb_progress_line_streams_into_a_pipe_as_read_in_bounded_memory(
    tmp_path: Path, state: dict[str, str]
) -> None:
    job = start(tmp_path, state, "bar", PROGRESS)
    argv = [sys.executable, "-c", PEAK_RSS, GPUJOB, "logs", "bar", "-f"]
    follow = subprocess.Popen(argv, env=state, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert follow.stdout is not None
    streamed, size, released = hashlib.sha256(), 0, False
    while chunk := follow.stdout.read1(1 << 16):
        streamed.update(chunk)
        size += len(chunk)
        if not released and size > 1 << 20:  # seen before the line ended: let it finish
            (job / "workdir" / "go").touch()
            released = True
    err = follow.stderr.read().decode() if follow.stderr else ""
    assert follow.wait() == 0, err
    log = (job / "node-0" / "job.log").read_bytes()
    assert size == len(log) > 100_000_000 and streamed.digest() == hashlib.sha256(log).digest()
    peak_kib = int(err.rsplit("peak-rss-kib ", 1)[1].split()[0])
    assert peak_kib < 100 * 1024, f"peak RSS {peak_kib} KiB"
    assert stat.S_IMODE((job / "node-0" / "job.log").stat().st_mode) in (0o644, 0o600)


def hang_up_heard() -> None:
    """SIGHUP back to its default in the follower: a suite run under `nohup` (or any parent
    that ignores it) passes SIG_IGN down, which gpujob keeps, as it must under nohup."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def test_nohup_follows_through_a_hang_up_and_signals_exit_128_plus_their_number(
    tmp_path: Path, state: dict[str, str]
) -> None:
    job = start(tmp_path, state, "ticks", TICKS)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        follow = subprocess.Popen([GPUJOB, "logs", "ticks", "-f"], env=state,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  preexec_fn=hang_up_heard)  # fmt: skip
        assert follow.stdout is not None
        while not follow.stdout.readline().startswith(b"tick "):  # after gpujob's own line
            pass
        follow.send_signal(sig)
        _, err = follow.communicate(timeout=30)
        assert follow.returncode == 128 + sig, (sig, follow.returncode, err.decode())
        assert b"stopped following; the job goes on" in err
    out = tmp_path / "nohup.out"
    with out.open("wb") as sink:
        kept = subprocess.Popen(["nohup", GPUJOB, "logs", "ticks", "-f"], env=state,
                                stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
        wait_for(lambda: out.read_bytes().count(b"tick ") >= 2)
        kept.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert kept.poll() is None, out.read_bytes()[-500:]
        seen = out.read_bytes().count(b"tick ")
        wait_for(lambda: out.read_bytes().count(b"tick ") > seen)  # still following
        (job / "workdir" / "stop").touch()
        assert kept.wait(timeout=60) == 0, out.read_bytes()[-500:]


def test_control_bytes_reach_a_terminal_escaped_and_a_pipe_as_they_are(
    tmp_path: Path, state: dict[str, str]
) -> None:
    job = start(tmp_path, state, "ctl", f"import sys\nsys.stdout.buffer.write({CONTROL!r})\n")
    wait_for(lambda: b"bar 100%" in (job / "node-0" / "job.log").read_bytes())
    piped = gpujob(state, "logs", "ctl")
    assert piped.returncode == 0 and piped.stdout.endswith(b" (launcher: none)\n" + CONTROL)
    main, side = pty.openpty()
    try:
        shown = subprocess.run([GPUJOB, "logs", "ctl"], env=state, stdout=side,
                               stderr=subprocess.PIPE, timeout=60, check=False)  # fmt: skip
        assert shown.returncode == 0, shown.stderr.decode()
        os.close(side)
        screen = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the other side is closed and drained
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(main)
    screen = screen.replace(b"\r\n", b"\n")  # the terminal's own newline translation
    assert b"title ^[]0;pwned^G here\n" in screen
    assert b"\x1b[31mred\x1b[0m plain\n" in screen  # colours are a progress bar's too
    assert b"clear ^[[2J screen\n" in screen
    assert b"nul ^@ bell ^G end\n" in screen
    assert b"csi M-^[2J one-byte M-^[31m kept \xc3\xa9\n" in screen
    assert b"bar 10%\rbar 100%\n" in screen  # the terminal draws the progress itself
    assert b"\x1b]" not in screen and b"\x07" not in screen and b"\x00" not in screen
    assert b"\x9b" not in screen
