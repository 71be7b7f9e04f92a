"""`gpujob lab up` and `gpujob lab down` through the real CLI: up works, down leaves nothing
of its lab and takes nothing of another lab.

Each test cycles a lab of its own (`lab_of_its_own`), never the session's, so it runs in any
order and on any worker beside the tests that hold the session's lab up.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from labtools import GPUJOB, lab_is_up, ssh

pytestmark = pytest.mark.lab


def gpujob(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], capture_output=True, text=True, timeout=600, env=env)


def timed_up() -> float:
    start = time.monotonic()
    done = gpujob("lab", "up", "--hosts", "2")
    assert done.returncode == 0, done.stderr
    return time.monotonic() - start


def leftovers(lab_dir: Path, recorded: list[dict], hosts: list[str]) -> list[str]:
    """Everything of the lab (its `hosts` among it) still on the machine, in words (empty
    when clean). Other labs' parts are theirs: only this lab's names count."""
    from infra.lab import naming, network, state

    found = []
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line}" for line in namespaces.splitlines()
              if line.startswith(naming.host_prefix())]  # fmt: skip
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    ours = {naming.bridge(), *[network.veth_name(host) for host in hosts]}
    found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
              if line.split(":")[1].strip().split("@")[0] in ours]  # fmt: skip
    found += [f"pid {rec['pid']} {rec['argv'][0]}" for rec in recorded if state.alive(rec)]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"{lab_dir}/" in argv and int(pid) != os.getpid():  # "/": not gjt1o2's for gjt1
            found.append(f"process {pid}: {argv[:120]}")
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    found += [f"mount {line.split()[4]}" for line in mounts
              if f"{line.split()[4]}/".startswith(f"{lab_dir}/")]  # fmt: skip
    label = f"label=gpujob.lab={naming.name()}"
    containers = subprocess.run(
        ["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True
    ).stdout.split()
    found += [f"container {c}" for c in containers]
    if subprocess.run(["iptables", "-C", *network.forward_rule()],
                      capture_output=True).returncode == 0:  # fmt: skip
        found.append(f"iptables FORWARD rule for {naming.bridge()}")
    return found


def recorded_hosts(lab_dir: Path) -> list[str]:
    return list(json.loads((lab_dir / "state.json").read_text())["hosts"])


def recorded_daemons(lab_dir: Path) -> list[dict]:
    lab = json.loads((lab_dir / "state.json").read_text())
    hosts = [rec[key] for rec in lab["hosts"].values() for key in ("sshd", "dockerd") if key in rec]
    return [*lab["daemons"].values(), *hosts]


def test_lab_up_then_down_leaves_nothing_behind(lab_of_its_own: str) -> None:
    from infra.lab import host_name, lab_dir, naming

    try:
        first = timed_up()  # in the try: a failed up is taken down too
        env = dict(line.removeprefix("export ").split("=", 1)
                   for line in gpujob("lab", "env").stdout.splitlines())  # fmt: skip
        env = {key: shlex.split(value)[0] for key, value in env.items()}
        assert env["GPUJOB_LAB_REGISTRY"] == f"{naming.bridge_address()}:5000"
        hosts = dict(pair.split("=") for pair in env["GPUJOB_LAB_HOSTS"].split(","))
        assert set(hosts) == {host_name("h1"), host_name("h2")}

        from infra.lab import list_hosts

        h1 = next(h for h in list_hosts() if h.name == host_name("h1"))
        container = ssh(h1, f"docker run -d --label gpujob.lab=test --network host "
                            f"{env['GPUJOB_LAB_BASE_IMAGE']} sleep 600",
                        Path(env["GPUJOB_LAB_KNOWN_HOSTS"]), timeout=120)  # fmt: skip
        assert container.returncode == 0, container.stderr
        recorded = recorded_daemons(lab_dir())
        made = recorded_hosts(lab_dir())
        assert len(recorded) >= 7  # registry, its forward, S3, its forward, 2 x (sshd, dockerd)
    finally:
        down = gpujob("lab", "down")
    assert down.returncode == 0, down.stderr
    assert leftovers(lab_dir(), recorded, made) == []

    second = timed_up()
    recorded, made = recorded_daemons(lab_dir()), recorded_hosts(lab_dir())
    down = gpujob("lab", "down")
    assert down.returncode == 0, down.stderr
    assert leftovers(lab_dir(), recorded, made) == []
    print(f"\nlab up: first {first:.1f} s, second (base image cached) {second:.1f} s")


def lab_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`gpujob lab env`'s variables, as a shell that evals them would have them."""
    done = gpujob("lab", "env", env=env)
    assert done.returncode == 0, done.stderr
    pairs = [line.removeprefix("export ").split("=", 1) for line in done.stdout.splitlines()]
    return {key: shlex.split(value)[0] for key, value in pairs}


def test_two_labs_side_by_side_and_down_takes_only_its_own(monkeypatch, lab_of_its_own) -> None:
    """A second lab (`--name`) beside the first: its own bridge, subnet, hosts, registry
    and folder; a host of each answers; `lab down --name` of the second leaves the first
    whole, and then the first's down leaves nothing of either."""
    from infra.lab import lab_dir, list_hosts, naming

    first = naming.name()
    second = f"{first[:10]}o2"  # the session's own name leads, so no other session takes it
    other_env = {**os.environ, naming.VARIABLE: second}
    assert gpujob("lab", "up", "--hosts", "1").returncode == 0
    try:
        done = gpujob("lab", "up", "--name", second, "--hosts", "1")
        assert done.returncode == 0, done.stderr
        mine, theirs = lab_env(), lab_env(other_env)
        assert (mine["GPUJOB_LAB_NAME"], theirs["GPUJOB_LAB_NAME"]) == (first, second)
        assert mine["GPUJOB_LAB_REGISTRY"] != theirs["GPUJOB_LAB_REGISTRY"]
        assert mine["GPUJOB_LAB_DIR"] != theirs["GPUJOB_LAB_DIR"]
        assert theirs["GPUJOB_LAB_HOSTS"].startswith(f"{second}-h1=")
        for env in (mine, theirs):
            name, address = env["GPUJOB_LAB_HOSTS"].split("=")
            with monkeypatch.context() as patch:
                patch.setenv(naming.VARIABLE, env["GPUJOB_LAB_NAME"])
                host = next(h for h in list_hosts() if h.name == name)
                assert host.address == address
                said = ssh(host, "hostname", Path(env["GPUJOB_LAB_KNOWN_HOSTS"]), timeout=120)
            assert (said.returncode, said.stdout.strip()) == (0, name), said.stderr
        with monkeypatch.context() as patch:
            patch.setenv(naming.VARIABLE, second)
            recorded, made = recorded_daemons(lab_dir()), recorded_hosts(lab_dir())
            down = gpujob("lab", "down", "--name", second)
            assert down.returncode == 0, down.stderr
            assert leftovers(lab_dir(), recorded, made) == []
        host = list_hosts()[0]
        still = ssh(host, "hostname", Path(mine["GPUJOB_LAB_KNOWN_HOSTS"]), timeout=120)
        assert (still.returncode, still.stdout.strip()) == (0, host.name), still.stderr
        assert lab_is_up()
        recorded, made = recorded_daemons(lab_dir()), recorded_hosts(lab_dir())
    finally:
        gpujob("lab", "down", "--name", second)
        shutil.rmtree(f"/tmp/gpujob-lab-{second}", ignore_errors=True)  # its caches
        down = gpujob("lab", "down")
    assert down.returncode == 0, down.stderr
    assert leftovers(lab_dir(), recorded, made) == []
