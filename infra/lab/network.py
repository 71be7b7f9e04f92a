"""The lab's wire: its bridge (`gjlab0` for the default lab) in the root namespace and one
veth per host.

The bridge holds .1 of the lab's /24 (10.77.0.1/24 for the default lab; infra.lab.naming);
every host's veth peer hangs off it, so hosts reach each other and the root namespace, and
nothing else (hosts get no default route). Docker in the root namespace sets the FORWARD
policy to DROP and, with `br_netfilter` loaded, bridged frames go through that chain too;
the lab inserts one ACCEPT rule for its bridge and removes it on `down`.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
from pathlib import Path

from infra.lab import naming
from infra.lab.naming import PREFIX_LEN
from infra.lab.state import run

NETNS_DIR = Path("/var/run/netns")
ROUTE_TYPES = {"local", "broadcast", "anycast", "unicast", "multicast", "unreachable",
               "blackhole", "prohibit", "throw", "nat"}  # fmt: skip


def forward_rule() -> list[str]:
    return ["FORWARD", "-i", naming.bridge(), "-o", naming.bridge(), "-j", "ACCEPT"]


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def bridge_argv(address: str | None = None) -> list[list[str]]:
    """The commands that make the bridge, for `--dry-run` and for doing it."""
    bridge = naming.bridge()
    if address is None:
        net = naming.subnet()
        address = f"{net.network_address + 1}" if net else f"<a free /24 of {naming.LAB_RANGE}>.1"
    return [
        ["ip", "link", "add", bridge, "type", "bridge"],
        ["ip", "addr", "add", f"{address}/{PREFIX_LEN}", "dev", bridge],
        ["ip", "link", "set", bridge, "up"],
        ["iptables", "-I", *forward_rule()],
    ]


def ensure_bridge() -> None:
    """Make the bridge unless it is there; a lab other than the default first claims a free
    /24 (under the machine-wide lock, until its address is on the bridge)."""
    if not link_exists(naming.bridge()):
        with naming.allocation_lock():
            net = naming.claim_subnet(used_networks())
            for argv in bridge_argv(str(net.network_address + 1))[:3]:
                run(argv)
    if run(["iptables", "-C", *forward_rule()], check=False).returncode != 0:
        run(["iptables", "-I", *forward_rule()])


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine has an address in or a route to (the default route
    aside): a lab's subnet must overlap none of them."""
    found = []
    for line in run(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
        words = line.split()
        if "inet" in words:
            found.append(ipaddress.IPv4Network(words[words.index("inet") + 1], strict=False))
    for line in run(["ip", "-4", "route", "show", "table", "all"]).stdout.splitlines():
        words = line.split()
        dest = words[1] if words[0] in ROUTE_TYPES and len(words) > 1 else words[0]
        if dest != "default":
            with contextlib.suppress(ValueError):
                found.append(ipaddress.IPv4Network(dest, strict=False))
    return found


def remove_bridge() -> None:
    while run(["iptables", "-C", *forward_rule()], check=False).returncode == 0:
        run(["iptables", "-D", *forward_rule()])
    if link_exists(naming.bridge()):
        run(["ip", "link", "del", naming.bridge()])


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
        ["ip", "link", "set", veth, "master", naming.bridge(), "up"],
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
    return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(naming.host_prefix()))
