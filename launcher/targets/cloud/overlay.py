"""A rented host's address on its overlay network (Vast multi-node: clouds.vast_overlay),
read on the host, as Vast's multi-node guide has you do: no API answer names it. The job's
nodes then meet there (c10d's endpoint, NCCL), not at the public address SSH goes through.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import TYPE_CHECKING

from launcher.errors import GpujobError

if TYPE_CHECKING:
    from launcher.clouds.base import Instance, Provider

ADDRESSES = ("sh", "-c", "ip -4 -o addr show 2>/dev/null || cat /proc/net/fib_trie")
"""Every IPv4 address of the host: `ip` where the image has it, else the kernel's own table
(an image without iproute2 still has /proc)."""


def address_in(text: str, subnet: str) -> str | None:
    """The first address of the host in `text` (`ip -o addr` lines, or /proc/net/fib_trie,
    whose own addresses are those followed by `/32 host LOCAL`) that lies in `subnet`; None
    if none does."""
    network = ipaddress.ip_network(subnet, strict=False)
    lines = text.splitlines()
    if any("host LOCAL" in line for line in lines):  # fib_trie: only the LOCAL entries
        text = " ".join(line for line, after in zip(lines, [*lines[1:], ""], strict=True)
                        if "host LOCAL" in after)  # fmt: skip
    for word in text.replace("\n", " ").split():
        try:
            address = ipaddress.ip_address(word.split("/")[0])
        except ValueError:
            continue
        if address in network:
            return str(address)
    return None


def with_overlay_address(provider: Provider, inst: Instance) -> Instance:
    """`inst` with its overlay address (`peer_ip`) when its provider made an overlay for
    the command; a host with no address in the overlay's subnet did not join it, and the
    job would hang at its rendezvous: refused here, before it starts."""
    net = getattr(provider, "overlay", None)
    subnet = getattr(net, "subnet", None)
    if net is None or not subnet:
        return inst
    from launcher.remote.hosts import connect, instance_entry

    conn = connect(instance_entry(inst))
    try:
        found = conn.run(ADDRESSES)
    finally:
        conn.close()
    address = address_in(found.stdout, subnet)
    if address is None:
        raise GpujobError(f"{inst.name} has no address on overlay network {net.name} "
                          f"({subnet}): its nodes could not reach each other",
                          "try again (another cluster may be chosen)")  # fmt: skip
    return dataclasses.replace(inst, peer_ip=address)
