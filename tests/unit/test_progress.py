"""Progress on waits: nothing for a fast step, a line then one every few seconds in a pipe,
and `gpujob ssh` to a host still booting (its port refusing, then open) says so as it waits."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from launcher.progress import waiting

GPUJOB = str(Path(sys.executable).with_name("gpujob"))


def test_a_wait_under_two_seconds_prints_nothing() -> None:
    out = io.StringIO()
    with waiting("connecting to h1", stream=out):
        time.sleep(0.3)
    assert out.getvalue() == ""


def test_a_longer_wait_prints_what_it_is_at_then_again_every_period() -> None:
    out = io.StringIO()
    with waiting("connecting to h1", stream=out, every_s=0.5) as wait:
        wait.note("attempt 3 refused")
        time.sleep(3.2)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("gpujob: connecting to h1: attempt 3 refused (2 s)"), lines
    assert 2 <= len(lines) <= 4, lines  # at 2 s, then every 0.5 s until 3.2 s
    assert all(line.startswith("gpujob: connecting to h1: attempt 3 refused (") for line in lines)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ssh_to_a_port_that_refuses_then_opens_shows_the_attempts(tmp_path: Path) -> None:
    """A host still booting: its port refuses for 4 s, then answers (as something that is not
    sshd, so the command ends at once with its own error). Meanwhile the user sees attempts."""
    port = free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def open_later() -> None:
        time.sleep(4)
        listener.bind(("127.0.0.1", port))
        listener.listen(1)
        conn, _ = listener.accept()
        conn.sendall(b"not ssh\r\n")
        conn.close()

    opener = threading.Thread(target=open_later, daemon=True)
    opener.start()
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    try:
        done = subprocess.run([GPUJOB, "ssh", f"root@127.0.0.1:{port}", "--", "true"], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        opener.join(timeout=10)
        listener.close()
    said = done.stderr.splitlines()
    where = f"gpujob: connecting to root@[127.0.0.1]:{port}: attempt "
    waits = [line for line in said if line.startswith(where)]
    assert waits, done.stderr
    assert "refused, retrying for up to 60 s" in waits[-1], done.stderr
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert said[-1].startswith("gpujob: error: "), done.stderr
