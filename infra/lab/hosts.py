"""Lab hosts: a network namespace on the lab bridge running sshd, and dockerd when asked.

Each host is what a rented GPU machine looks like to gpujob from the outside: an address,
port 22, root login with the lab's key, a host key to pin, and (with `docker=True`) a Docker
engine of its own that SSH sessions use by default. Killing a host's processes and calling
`create_host` again is a reboot: same address, same host key, same /root "disk".
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.lab import boot, naming, network, state
from infra.lab.state import lab_dir

__all__ = [
    "LabHost", "create_host", "destroy_host", "kill_host_processes", "lab_dir", "list_hosts",
    "user_key",
]  # fmt: skip


@dataclass(frozen=True)
class LabHost:
    """One lab host as a client sees it. Its /root and /tmp are its own (see infra.lab.boot)."""

    name: str
    address: str
    ssh_port: int
    ssh_user: str
    docker_host: str | None
    host_key_path: str


def user_key() -> Path:
    """The lab's private SSH key; made once, atomically, so concurrent first uses agree."""
    keys = lab_dir() / "keys"
    private = keys / "id_ed25519"
    if not private.exists():
        keys.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=keys) as tmp:
            made = Path(tmp) / "id_ed25519"
            state.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpujob-lab",
                       "-f", str(made)])  # fmt: skip
            os.replace(f"{made}.pub", f"{private}.pub")
            os.replace(made, private)
    private.chmod(0o600)
    return private


def known_hosts_path() -> Path:
    """An OpenSSH known_hosts file pinning every lab host's key, rewritten on each change."""
    return lab_dir() / "known_hosts"


def host_name(name: str) -> str:
    """Every host's namespace carries the lab's prefix, so `down` can find strays by name."""
    prefix = naming.host_prefix()
    return name if name.startswith(prefix) else prefix + name


def create_host(name: str, *, docker: bool = False) -> LabHost:
    """Make a host, or boot it again if its processes died; idempotent for a running host."""
    name = host_name(name)
    public_key = Path(f"{user_key()}.pub")
    with state.locked_state() as lab:
        network.ensure_bridge()  # first: a lab's first bridge claims its subnet
        rec = lab["hosts"].get(name)
        if rec is None or not _in_subnet(rec["address"]):  # a record of an older subnet
            rec = {"address": _free_address(lab), "docker": docker}
            lab["hosts"][name] = rec
        rec["docker"] = rec["docker"] or docker
        if not network.netns_exists(name):
            network.add_host(name, rec["address"])
        boot.prepare(name, rec["address"], public_key, rec["docker"])
        _boot(name, rec)
        _write_known_hosts(lab)
        return _lab_host(name, rec)


def _boot(name: str, rec: dict[str, Any]) -> None:
    if not state.alive(rec.get("sshd")):
        _kill_all(name)  # a half-dead host boots whole, never a dockerd in a stale namespace
        rec.pop("dockerd", None)
        rec["sshd"] = boot.start_sshd(name, rec["address"])
    if rec["docker"] and not state.alive(rec.get("dockerd")):
        rec["dockerd"] = boot.start_dockerd(name, rec["sshd"]["pid"])


def destroy_host(name: str) -> None:
    """Kill the host's processes, then remove its namespace, veth, cgroups and folder.

    No grace: the machine is gone, as a cloud's terminate ends a VM. A dockerd given SIGTERM
    first waits for its containers to stop, and a container that ignores SIGTERM (a paused
    job, a shell's trap) held every destroy of a host with one for the 5 s the grace was.
    dockerd's mounts live in the host's own mount namespace, which goes with its processes."""
    name = host_name(name)
    with state.locked_state() as lab:
        for key in ("dockerd", "sshd"):
            state.stop(lab["hosts"].get(name, {}).get(key), timeout=0)
        _kill_all(name)
        network.remove_host(name)
        address = lab["hosts"].get(name, {}).get("address")
        if address:  # forget its MAC: the next host with this address has another
            state.run(["ip", "neigh", "flush", "to", address], check=False)
            for other in lab["hosts"]:  # the other hosts too (a kept peer of a recovered job)
                if other != name and network.netns_exists(other):
                    state.run(["ip", "-n", other, "neigh", "flush", "to", address], check=False)
        boot.remove_cgroups(name)
        shutil.rmtree(boot.host_dir(name), ignore_errors=True)
        lab["hosts"].pop(name, None)
        _write_known_hosts(lab)


def list_hosts() -> list[LabHost]:
    lab = state.read_state()
    return [
        _lab_host(name, rec)
        for name, rec in sorted(lab["hosts"].items())
        if network.netns_exists(name)
    ]


def kill_host_processes(name: str) -> None:
    """A crash: SIGKILL every process in the host's namespace and its containers' cgroups.

    The namespace, veth, address and folder stay, as a machine's disk and NIC outlive a
    power cut; `create_host(name)` boots it again.
    """
    _kill_all(host_name(name))


def _kill_all(name: str) -> None:
    """SIGKILL until nothing is left: a dying dockerd's containerd can still fork a shim."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pids = network.pids_in_netns(name) | boot.cgroup_pids(name)
        pids.discard(os.getpid())
        live = {pid for pid in pids if state.start_time(pid) is not None}
        if not live:
            return
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            state.reap(pid)
        time.sleep(0.05)
    raise state.LabError(f"lab: processes of {name} survive SIGKILL: {sorted(live)}")


def _free_address(lab: dict[str, Any]) -> str:
    """The next free address after the last one given, round the lab's /24: an address freed a
    moment ago is not handed out again at once, because the machine and the other hosts
    still hold its old MAC in their neighbour tables (connects then fail until those expire,
    as they would on a real LAN where an IP moved to a new NIC without a gratuitous ARP)."""
    used = {rec["address"] for rec in lab["hosts"].values()}
    network_ = naming.subnet()
    bridge = naming.bridge_address()
    assert network_ is not None  # the bridge is made first
    pool = [str(a) for a in network_.hosts() if str(a) != bridge]
    last = lab.get("last_address")
    start = pool.index(last) + 1 if last in pool else 0
    for address in pool[start:] + pool[:start]:
        if address not in used:
            lab["last_address"] = address
            return address
    raise state.LabError("lab: no free address left on the lab bridge")


def _in_subnet(address: str) -> bool:
    return ipaddress.ip_address(address) in (naming.subnet() or naming.DEFAULT_SUBNET)


def _lab_host(name: str, rec: dict[str, Any]) -> LabHost:
    return LabHost(
        name=name,
        address=rec["address"],
        ssh_port=22,
        ssh_user="root",
        docker_host=f"unix://{boot.docker_socket(name)}" if rec["docker"] else None,
        host_key_path=str(boot.host_dir(name) / "ssh_host_ed25519_key.pub"),
    )


def _write_known_hosts(lab: dict[str, Any]) -> None:
    lines = []
    for name, rec in sorted(lab["hosts"].items()):
        key_file = boot.host_dir(name) / "ssh_host_ed25519_key.pub"
        if key_file.exists():
            key_type, key = key_file.read_text().split()[:2]
            lines.append(f"{rec['address']} {key_type} {key}\n")
    tmp = known_hosts_path().with_suffix(".tmp")
    tmp.write_text("".join(lines))
    tmp.replace(known_hosts_path())
