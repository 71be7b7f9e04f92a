"""A Ctrl-C while `--keep-on-failure` arms a failed job's hosts: the hosts stay up (each
still ends itself), so the user is told so and how to end them now, before the command
ends. A real process, a real SIGINT, and a host that never answers the SSH handshake (a
listening socket on loopback that says nothing), so the arm is under way when it comes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

ARM = """
import sys, time
from launcher.remote.hosts import HostEntry
from launcher.say import say
from launcher.state.db import JobRecord
from launcher.targets.cloud.keep import keep_failed

entry = HostEntry(name="gpujob-x-a100-1", address="127.0.0.1", port=int(sys.argv[1]),
                  user="root", instance="lambda:i-1")
job = JobRecord("kj-1", "kj", "job.yaml", "lambda", "bare", [entry.to_record()],
                ["~/.gpujob/jobs/kj-1/node-0"], "failed", 3, time.time(), time.time(), "boom")
keep_failed(job, 1800, say, 0)
"""


def interrupt_heard() -> None:
    """SIGINT back to its default in the child, so Python raises KeyboardInterrupt on it: a
    suite started in the background (`make test &`) passes SIG_IGN down, and Python keeps an
    ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_ctrl_c_while_the_keep_is_armed_says_the_hosts_stay_and_how_to_end_them(
    tmp_path: Path,
) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    silent.settimeout(60)
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    arming = subprocess.Popen([sys.executable, "-c", ARM, str(silent.getsockname()[1])],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, preexec_fn=interrupt_heard)  # fmt: skip
    try:
        contact, _ = silent.accept()  # the arm's SSH handshake has begun
        arming.send_signal(signal.SIGINT)
        _, err = arming.communicate(timeout=60)
    finally:
        arming.kill()
        silent.close()
    contact.close()
    assert "KeyboardInterrupt" in err  # the interrupt goes on, after the line
    said = [line for line in err.splitlines() if line.startswith("gpujob: ")]
    assert said == [
        "gpujob: interrupted while keeping job kj-1's hosts for a look: they stay up and end "
        "themselves (at the 30m window's end where it was armed, else by their autostop from "
        "the rent); `gpujob down kj-1` ends them now"
    ], err
