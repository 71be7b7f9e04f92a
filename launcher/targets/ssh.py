"""SSH hosts you have (`--on HOST`: a hosts.yaml name or user@addr[:port]): each contacted
once for its facts, on a thread while the spec loads, and the job placed on them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.remote.base import Connection
from launcher.say import say
from launcher.targets.base import JobInput, LaunchRequest, Traits
from launcher.targets.hosts import HostsTarget

if TYPE_CHECKING:
    from launcher.spec.image import ImageDefinition
    from launcher.targets.placement import EarlyContact, Placement


def remote_traits(*, rents_hosts: bool, runs_in_image: bool = False) -> Traits:
    """Nodes on hosts reached over SSH: the host's python3 runs the agent; gpujob stops the
    other nodes when one fails. Only hosts gpujob rents can be replaced (recovery)."""
    return Traits(
        on_this_machine=False,
        rents_hosts=rents_hosts,
        runs_in_image=runs_in_image,
        stops_others_on_failure=True,
        recoverable=rents_hosts,
        agent_python="python3",
    )


class RemoteHostsTarget(HostsTarget):
    """Nodes on hosts reached over SSH, each host by the record the job keeps."""

    def connection(self, host_record: str, opened: dict[str, Connection]) -> tuple[str, Connection]:
        from launcher.remote import hosts as ssh_hosts

        entry = ssh_hosts.HostEntry.from_record(host_record)
        if entry.name not in opened:
            opened[entry.name] = ssh_hosts.connect(entry)
        return entry.name, opened[entry.name]


class SshTarget(RemoteHostsTarget):
    kind = "ssh"
    traits = remote_traits(rents_hosts=False)

    def __init__(self) -> None:
        self.early: EarlyContact | None = None

    def start_contact(self, request: LaunchRequest) -> None:
        from launcher.plan.placement import split_on
        from launcher.targets.placement import EarlyContact

        if not request.dry_run:
            self.early = EarlyContact(split_on(request.on))

    def close(self) -> None:
        if self.early is not None:
            self.early.close()

    def place(
        self, job: JobInput, request: LaunchRequest
    ) -> tuple[Placement, ImageDefinition | None]:
        from launcher.plan.placement import node_hosts, split_on
        from launcher.remote import hosts as ssh_hosts
        from launcher.targets.placement import remote_placement

        names = node_hosts(split_on(request.on), job.loaded.spec.nodes)
        entries = [ssh_hosts.resolve_host(name) for name in names]
        placed = remote_placement(
            job.loaded.spec, job.image, entries, runtime=request.runtime,
            dry_run=request.dry_run, provider=self.kind, early=self.early,
        )  # fmt: skip
        if placed.note:
            say(placed.note)
        return placed, job.image
