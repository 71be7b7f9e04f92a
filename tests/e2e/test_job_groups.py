"""A SkyPilot job group run on this machine through the real CLI: two CPU tasks started
together, each given the other's address as SkyPilot names it, exchanging a message over
loopback; `status` shows both under their group, `logs GROUP` prefixes each line by its
task, `cancel GROUP` stops both."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

GPUJOB = str(Path(sys.executable).with_name("gpujob"))


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))


def gpujob(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False, cwd=cwd)  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def jobs_of(env: dict[str, str]) -> dict[str, dict]:
    result = gpujob(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    return {row["group"].split("/")[1]: row for row in json.loads(result.stdout)["jobs"]
            if row.get("group")}  # fmt: skip


def test_two_tasks_exchange_a_message_through_the_addresses_they_are_given(
    tmp_path: Path, state: dict[str, str]
) -> None:
    port = free_port()
    (tmp_path / "group.yaml").write_text(f"""\
---
name: pingpong
execution: parallel
---
name: server
run: |
  echo "server was given client=$SKYPILOT_JOBGROUP_HOST_CLIENT group=$SKYPILOT_JOBGROUP_NAME"
  echo "hello from the server" > msg.txt
  python3 -c "import http.server as h; \
    h.HTTPServer(('127.0.0.1', {port}), h.SimpleHTTPRequestHandler).handle_request()"
---
name: client
run: |
  echo "client was given server=$SKYPILOT_JOBGROUP_HOST_SERVER group=$SKYPILOT_JOBGROUP_NAME"
  for i in $(seq 150); do
    python3 -c "import urllib.request as u; \
      url = 'http://$SKYPILOT_JOBGROUP_HOST_SERVER:{port}/msg.txt'; \
      print('got:', u.urlopen(url).read().decode().strip())" 2>/dev/null && exit 0
    sleep 0.2
  done
  exit 1
""")  # fmt: skip
    result = gpujob(state, "submit", "group.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout.splitlines()
    assert "[server] server was given client=127.0.0.1 group=pingpong" in out
    assert "[client] client was given server=127.0.0.1 group=pingpong" in out
    assert "[client] got: hello from the server" in out
    assert any(line.startswith("[server] ") and "GET /msg.txt" in line for line in out)

    jobs = jobs_of(state)
    assert {task: (row["state"], row["exit_code"]) for task, row in jobs.items()} == {
        "server": ("succeeded", 0), "client": ("succeeded", 0)}  # fmt: skip
    group_id = jobs["server"]["group"].split("/")[0]
    assert jobs["client"]["group"] == f"{group_id}/client"
    table = gpujob(state, "status").stdout
    assert f"{group_id}/server" in table and f"{group_id}/client" in table

    again = gpujob(state, "logs", "pingpong")  # the group by its name: each line prefixed
    assert again.returncode == 0, again.stderr
    assert "[client] got: hello from the server" in again.stdout.splitlines()


def test_a_cancel_of_the_group_stops_every_task(tmp_path: Path, state: dict[str, str]) -> None:
    (tmp_path / "group.yaml").write_text(
        "name: sleepers\nexecution: parallel\n---\nname: a\nrun: echo up; sleep 300\n"
        "---\nname: b\nrun: echo up; sleep 300\n"
    )
    started = gpujob(state, "submit", "group.yaml", "--detach", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    group_id = started.stdout.strip()
    deadline = time.monotonic() + 60
    while {row["state"] for row in jobs_of(state).values()} != {"running"}:
        assert time.monotonic() < deadline, jobs_of(state)
        time.sleep(0.3)
    cancelled = gpujob(state, "cancel", group_id, "--grace", "2")
    assert cancelled.returncode == 0, cancelled.stderr
    jobs = jobs_of(state)
    assert {task: row["state"] for task, row in jobs.items()} == {"a": "cancelled",
                                                                  "b": "cancelled"}  # fmt: skip
    for row in jobs.values():  # nothing of the job is left running on this machine
        pids = subprocess.run(["pgrep", "-f", f"jobs/{row['id']}/"], capture_output=True,
                              text=True, check=False).stdout.split()  # fmt: skip
        assert not pids, (row["id"], pids)


def test_auxiliary_tasks_are_stopped_once_the_primary_task_ends(
    tmp_path: Path, state: dict[str, str]
) -> None:
    (tmp_path / "group.yaml").write_text(
        "name: with-helper\nexecution: parallel\nprimary_tasks: [main]\ntermination_delay: 1s\n"
        "---\nname: main\nrun: sleep 2; echo main done\n"
        "---\nname: helper\nrun: echo helping; sleep 300\n"
    )
    result = gpujob(state, "submit", "group.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]  # the group's code: its primary task's
    assert "[main] main done" in result.stdout.splitlines()
    states = {task: row["state"] for task, row in jobs_of(state).items()}
    assert states == {"main": "succeeded", "helper": "cancelled"}
