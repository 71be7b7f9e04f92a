"""A multi-node job's hosts opened to each other on their cloud's firewall, and closed again;
and a recovery's replacement pinned to the region of the hosts it keeps.

The cloud does the work where it has a firewall that would block the job (Lambda:
clouds.lambda_firewall); a cloud without one (no `open_to_peers`) is left alone. The ports
are the job's: the rendezvous port the other nodes dial on node 0, the ports it serves
(`ports:`), and the ephemeral range NCCL's and Gloo's sockets bind in (they take no fixed
port); Ray's worker ports with Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from launcher.errors import GpujobError

if TYPE_CHECKING:
    from launcher.clouds.base import Instance, Provider
    from launcher.clouds.lambda_firewall import PeerPorts
    from launcher.spec.job import JobSpec

EPHEMERAL = (32768, 60999)
"""Linux's default ip_local_port_range: where NCCL's bootstrap and socket transport and
Gloo's pairs listen (neither takes a fixed port)."""
RAY_WORKERS = (10002, 19999)
"""Ray's default worker port range (`--min-worker-port`/`--max-worker-port`)."""


def peers_for(spec: JobSpec, job_id: str, kept: Iterable[str] = ()) -> PeerPorts | None:
    """What the job's hosts must reach on each other; None for one node."""
    from launcher.clouds.lambda_firewall import PeerPorts
    from launcher.plan.reach import rendezvous_port

    if spec.nodes < 2:
        return None
    port = rendezvous_port(spec)
    ports = [(port, port, "rendezvous"), (*EPHEMERAL, "NCCL and Gloo sockets")]
    if spec.run.launcher_name == "ray":
        ports.append((*RAY_WORKERS, "Ray workers"))
    ports += [(p, p, "ports:") for p in spec.ports if not any(a <= p <= b for a, b, _ in ports)]
    return PeerPorts(job_id, tuple(ports), tuple(kept))


def arm(provider: Provider, peers: PeerPorts | None) -> None:
    """The provider's launches from now on carry the job's firewall, where it has one."""
    hook = getattr(provider, "open_to_peers", None)
    if peers is not None and hook is not None:
        from launcher.say import say

        remove_unused(provider, say, hurry=lambda: True)  # earlier jobs' left to go
        hook(peers)


def open_between(provider: Provider, instances: list[Instance], say: Callable[[str], None]) -> None:
    """Once the hosts run (their addresses known): the job's rules written."""
    hook = getattr(provider, "open_peers", None)
    if hook is not None:
        for line in hook([str(inst.ip) for inst in instances if inst.ip]):
            say(line)


def remove_made(provider: Provider, say: Callable[[str], None], hurry: Callable[[], bool]) -> None:
    """A failed or interrupted command's rulesets removed, after its hosts were terminated."""
    made: list[str] = getattr(provider, "rulesets_made", list)()
    if made:
        remove_unused(provider, say, only=made, hurry=hurry)


def remove_unused(
    provider: Provider,
    say: Callable[[str], None],
    only: list[str] | None = None,
    hurry: Callable[[], bool] | None = None,
    dry_run: bool = False,
) -> None:
    """gpujob's rulesets that no running host uses any more, removed; a failure is said."""
    hook = getattr(provider, "remove_rulesets", None)
    if hook is None:
        return
    try:
        lines = hook(only, hurry, dry_run)
    except GpujobError as error:
        lines = [f"could not look for firewall rulesets to remove: {error.one_line()}; "
                 "`gpujob down --all` tries again"]  # fmt: skip
    for line in lines:
        say(line)


def kept_region(kind: str, kept: tuple[str, ...]) -> str | None:
    """The region of the hosts a recovery keeps, where its cloud says one (all the same):
    the replacement is rented there, beside them (and their filesystem)."""
    from launcher.clouds.registry import get_provider
    from launcher.remote.hosts import HostEntry

    region_of = getattr(get_provider(kind), "region_of", None)
    if region_of is None:
        return None
    regions = set()
    for record in kept:
        instance = HostEntry.from_record(record).instance if record else None
        if instance and ":" in instance:
            regions.add(region_of(instance.split(":", 1)[1]))
    regions.discard(None)
    return regions.pop() if len(regions) == 1 else None
