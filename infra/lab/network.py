"""The lab's wire: the `gjlab0` bridge in the root namespace and one veth per host.

The bridge holds 10.77.0.1/24; every host's veth peer hangs off it, so hosts reach each other
and the root namespace, and nothing else (hosts get no default route). Docker in the root
namespace sets the FORWARD policy to DROP and, with `br_netfilter` loaded, bridged frames go
through that chain too; the lab inserts one ACCEPT rule for gjlab0 and removes it on `down`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from infra.lab.state import BRIDGE, BRIDGE_ADDRESS, PREFIX_LEN, run

FORWARD_RULE = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"]
NETNS_DIR = Path("/var/run/netns")


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def bridge_argv() -> list[list[str]]:
    """The commands that make the bridge, for `--dry-run` and for doing it."""
    return [
        ["ip", "link", "add", BRIDGE, "type", "bridge"],
        ["ip", "addr", "add", f"{BRIDGE_ADDRESS}/{PREFIX_LEN}", "dev", BRIDGE],
        ["ip", "link", "set", BRIDGE, "up"],
        ["iptables", "-I", *FORWARD_RULE],
    ]


def ensure_bridge() -> None:
    if not link_exists(BRIDGE):
        for argv in bridge_argv()[:3]:
            run(argv)
    if run(["iptables", "-C", *FORWARD_RULE], check=False).returncode != 0:
        run(["iptables", "-I", *FORWARD_RULE])


def remove_bridge() -> None:
    while run(["iptables", "-C", *FORWARD_RULE], check=False).returncode == 0:
        run(["iptables", "-D", *FORWARD_RULE])
    if link_exists(BRIDGE):
        run(["ip", "link", "del", BRIDGE])


def veth_name(host: str) -> str:
    """Root-side veth name: interface names stop at 15 bytes, host names may not."""
    return "gjv" + hashlib.sha1(host.encode()).hexdigest()[:10]


def netns_exists(host: str) -> bool:
    return (NETNS_DIR / host).exists()


def host_argv(host: str, address: str) -> list[list[str]]:
    veth = veth_name(host)
    return [
        ["ip", "netns", "add", host],
        ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host],
        ["ip", "link", "set", veth, "master", BRIDGE, "up"],
        ["ip", "-n", host, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", "eth0"],
        ["ip", "-n", host, "link", "set", "eth0", "up"],
        ["ip", "-n", host, "link", "set", "lo", "up"],
    ]


def add_host(host: str, address: str) -> None:
    for argv in host_argv(host, address):
        run(argv)


def remove_host(host: str) -> None:
    """Delete the namespace, then the root-side veth, which can outlive it for a while."""
    if netns_exists(host):
        run(["ip", "netns", "del", host])
    veth = veth_name(host)
    if link_exists(veth):
        run(["ip", "link", "del", veth], check=False)


def pids_in_netns(host: str) -> set[int]:
    """Every process whose network namespace is the host's (what `ip netns pids` prints)."""
    try:
        target = os.stat(NETNS_DIR / host)
    except FileNotFoundError:
        return set()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry}/ns/net")
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        if (ns.st_ino, ns.st_dev) == (target.st_ino, target.st_dev):
            found.add(int(entry))
    return found


def lab_namespaces() -> list[str]:
    if not NETNS_DIR.exists():
        return []
    return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith("gjlab-"))
