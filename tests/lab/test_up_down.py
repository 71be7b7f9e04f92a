"""`gpujob lab up` and `gpujob lab down` through the real CLI: up works, down leaves nothing.

Runs first among the lab tests (see conftest) because it cycles the one lab of the machine.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from labtools import REPO, lab_is_up, lab_missing, ssh

pytestmark = pytest.mark.lab

GPUJOB = str(REPO / ".venv" / "bin" / "gpujob")


def gpujob(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], capture_output=True, text=True, timeout=600)


def timed_up() -> float:
    start = time.monotonic()
    done = gpujob("lab", "up", "--hosts", "2")
    assert done.returncode == 0, done.stderr
    return time.monotonic() - start


def leftovers(lab_dir: Path, recorded: list[dict]) -> list[str]:
    """Everything of the lab still on the machine, in words (empty when clean)."""
    from infra.lab import state

    found = []
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line}" for line in namespaces.splitlines() if line.startswith("gjlab-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
              if line.split(":")[1].strip().startswith(("gjlab", "gjv"))]  # fmt: skip
    found += [f"pid {rec['pid']} {rec['argv'][0]}" for rec in recorded if state.alive(rec)]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(lab_dir) in argv and int(pid) != os.getpid():
            found.append(f"process {pid}: {argv[:120]}")
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    found += [f"mount {line.split()[4]}" for line in mounts if str(lab_dir) in line.split()[4]]
    containers = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=gpujob.lab"], capture_output=True, text=True
    ).stdout.split()
    found += [f"container {c}" for c in containers]
    rule = ["iptables", "-C", "FORWARD", "-i", "gjlab0", "-o", "gjlab0", "-j", "ACCEPT"]
    if subprocess.run(rule, capture_output=True).returncode == 0:
        found.append("iptables FORWARD rule for gjlab0")
    return found


def recorded_daemons(lab_dir: Path) -> list[dict]:
    lab = json.loads((lab_dir / "state.json").read_text())
    hosts = [rec[key] for rec in lab["hosts"].values() for key in ("sshd", "dockerd") if key in rec]
    return [*lab["daemons"].values(), *hosts]


def test_lab_up_then_down_leaves_nothing_behind(tmp_path):
    reason = lab_missing()
    if reason:
        pytest.skip(reason)
    if lab_is_up():
        pytest.skip("a lab is already up on this machine; this test would tear it down")
    from infra.lab import lab_dir, network

    if network.lab_namespaces():  # debris of a session that was killed: the cycle starts clean
        assert gpujob("lab", "down").returncode == 0

    first = timed_up()
    try:
        env = dict(line.removeprefix("export ").split("=", 1)
                   for line in gpujob("lab", "env").stdout.splitlines())  # fmt: skip
        env = {key: shlex.split(value)[0] for key, value in env.items()}
        assert env["GPUJOB_LAB_REGISTRY"] == "10.77.0.1:5000"
        hosts = dict(pair.split("=") for pair in env["GPUJOB_LAB_HOSTS"].split(","))
        assert set(hosts) == {"gjlab-h1", "gjlab-h2"}

        from infra.lab import list_hosts

        h1 = next(h for h in list_hosts() if h.name == "gjlab-h1")
        container = ssh(h1, f"docker run -d --label gpujob.lab=test --network host "
                            f"{env['GPUJOB_LAB_BASE_IMAGE']} sleep 600",
                        Path(env["GPUJOB_LAB_KNOWN_HOSTS"]), timeout=120)  # fmt: skip
        assert container.returncode == 0, container.stderr
        recorded = recorded_daemons(lab_dir())
        assert len(recorded) >= 7  # registry, its forward, S3, its forward, 2 x (sshd, dockerd)
    finally:
        down = gpujob("lab", "down")
    assert down.returncode == 0, down.stderr
    assert leftovers(lab_dir(), recorded) == []

    second = timed_up()
    recorded = recorded_daemons(lab_dir())
    down = gpujob("lab", "down")
    assert down.returncode == 0, down.stderr
    assert leftovers(lab_dir(), recorded) == []
    print(f"\nlab up: first {first:.1f} s, second (base image cached) {second:.1f} s")
