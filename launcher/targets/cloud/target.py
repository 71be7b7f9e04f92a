"""Hosts rented from a cloud for the job (`submit --up GPU`): every check this machine can make
before the first cloud call, one host per node rented through the command's `Rent` (all or
nothing), the job placed on them as on SSH hosts; `release` terminates what the job rented.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from launcher.clouds.base import Instance, ProviderError
from launcher.errors import GpujobError
from launcher.say import say
from launcher.state.db import JobRecord
from launcher.targets.base import JobInput, LaunchRequest
from launcher.targets.ssh import RemoteHostsTarget, remote_traits

if TYPE_CHECKING:
    from collections.abc import Callable

    from launcher.clouds.lambda_firewall import PeerPorts
    from launcher.plan.model import NodeLayout, Plan
    from launcher.plan.placement import RuntimeChoice
    from launcher.remote.hosts import HostEntry
    from launcher.spec.image import ImageDefinition
    from launcher.targets.cloud.rent import Rent
    from launcher.targets.placement import Placement


@dataclass(frozen=True)
class JobHost:
    """One node's host as the job's record names it."""

    rank: int
    name: str
    instance_id: str | None
    address: str
    port: int | None
    user: str | None


def job_hosts(job: JobRecord) -> list[JobHost]:
    from launcher.remote.hosts import HostEntry

    hosts = []
    for rank, record in enumerate(job.hosts):
        entry = HostEntry.from_record(record)
        instance = entry.instance.split(":", 1)[1] if entry.instance else None
        hosts.append(JobHost(rank, entry.name, instance, entry.address, entry.port, entry.user))
    return hosts


class CloudTarget(RemoteHostsTarget):
    def __init__(self, kind: str, rent: Rent | None = None) -> None:
        from launcher.clouds.registry import trait

        self.kind = kind
        self.rent = rent
        """The command's rent (None for a dry run, or a job already running)."""
        self.price: float | None = None
        """What the rented hosts cost together per hour, as their cloud quoted it."""
        self.resume: Callable[[list[str]], str | None] | None = None
        """A recovery keeping hosts: its resume checkpoint's name, known only once the kept
        nodes' job has stopped, which runs while this target rents the replacements (the
        rent needs no checkpoint): asked once the nodes are placed, before the plan, with
        the placed hosts' records (the replacements' pull can start then)."""
        self._resumed: tuple[str | None] | None = None
        in_image = bool(trait(kind, "runs_in_image", False))
        self.traits = remote_traits(rents_hosts=True, runs_in_image=in_image)

    def place(
        self, job: JobInput, request: LaunchRequest
    ) -> tuple[Placement, ImageDefinition | None]:
        from launcher.targets.placement import remote_placement

        # A host that IS the job's image (Vast) runs the job in its environment as it is:
        # building another from the pins there would be slow and offline.
        in_image = self.traits.runs_in_image
        if not request.dry_run:
            request = self._clear_the_rent(job, request)
        from launcher.clouds.registry import runtime_of

        image = None if in_image else job.image
        entries = self._rented_hosts(request, job)
        placed = remote_placement(
            job.loaded.spec, image, entries, runtime=request.runtime,
            dry_run=request.dry_run, provider=self.kind,
            pulled=runtime_of(self.kind) == "docker",  # up's bootstrap pulls the job's image
        )  # fmt: skip
        if placed.note:
            say(placed.note)
        if self.resume is not None and not request.dry_run:
            try:
                self._resumed = (self.resume(placed.records),)
            except BaseException:
                for conn in placed.connections.values():
                    conn.close()
                raise
        return placed, image

    def _clear_the_rent(self, job: JobInput, request: LaunchRequest) -> LaunchRequest:
        """Every check this machine can make, before the first cloud call: the plan for
        placeholder hosts (as --dry-run builds it, merge guard included), the S3 remotes
        from here, the image, the disk budget. Returns the request with the disk an offer
        needs."""
        from launcher.plan.placement import image_reference
        from launcher.remote.hosts import HostEntry
        from launcher.targets.cloud.before_rent import check_before_rent
        from launcher.targets.placement import remote_placement

        spec, in_image = job.loaded.spec, self.traits.runs_in_image
        entries = [HostEntry(name=f"<new {self.kind} host {rank}>", address="192.0.2.1")
                   for rank in range(spec.nodes)]  # fmt: skip
        runtime: RuntimeChoice = "bare" if in_image else request.runtime
        image = None if in_image else job.image

        def rehearse() -> None:
            assumed = remote_placement(spec, image, entries, runtime=runtime,
                                       dry_run=True, provider=self.kind)  # fmt: skip
            self.plan_for(job, request, assumed.target, image, lambda _: None)

        ref = image_reference(spec.image, job.image)
        _keep_can_end(self.kind, request, job)
        cleared = check_before_rent(job.loaded, job.image, ref, request.disk, rehearse, say)
        _runs_before_rent(job)
        return replace(request, disk=max(request.disk, cleared.min_disk_gb))

    def _rented_hosts(self, request: LaunchRequest, job: JobInput) -> list[HostEntry]:
        """One host per node from `gpujob up`'s own launch (all or nothing); a dry run
        shows the offers and rents nothing."""
        from launcher.plan.placement import image_reference
        from launcher.remote.hosts import HostEntry, instance_entry
        from launcher.spec.keep import keep_window
        from launcher.targets.cloud.hosts import UpOptions, launch_hosts

        spec = job.loaded.spec
        autostop = spec.resources.autostop
        keep = keep_window(request.keep_on_failure, spec.keep_on_failure)  # its end, from rent
        ref = image_reference(spec.image, job.image)
        kept = request.keep_hosts  # a recovery keeping hosts rents only the others
        count = sum(1 for record in kept if not record) if kept else spec.nodes
        region, peers = self._beside_kept(job, kept, request.dry_run)
        options = UpOptions(gpu=request.up or "", provider=self.kind, count=count,
                            yes=request.yes, dry_run=request.dry_run,
                            allow_cpu=request.allow_cpu,
                            image=ref, disk=request.disk, max_price=request.max_price,
                            max_cost=request.max_cost, max_duration_s=spec.max_duration,
                            autostop_s=autostop.idle_minutes * 60 if autostop else keep,
                            keep_s=keep,
                            autostop_stop=bool(autostop and not autostop.down),
                            autostop_key_on_host=request.autostop_key_on_host,
                            spot=spec.resources.use_spot, renting="submit --up",
                            instance_image=ref if self.traits.runs_in_image else None,
                            filesystem=spec.resources.filesystem,
                            volume=spec.resources.volume,
                            one_network=spec.nodes > 1 and not kept,
                            offers_on_stderr=True, region=region, peers=peers,
                            ports=tuple(spec.ports), runtime=request.runtime)  # fmt: skip
        try:
            instances = launch_hosts(options, self.rent)
        except ProviderError as error:
            scarce = "no offer for" in error.message or "no capacity for" in error.message
            if region is None or not scarce:  # launch_cheapest's and no_offers' words
                raise
            raise ProviderError(f"{error.message}: the kept hosts' region, where a "
                                "replacement must run") from None  # fmt: skip
        prices = [inst.price_per_hour for inst in instances]
        self.price = sum(p for p in prices if p) if prices and None not in prices else None
        if request.dry_run:
            return [HostEntry(name=f"<new {self.kind} host {rank}>", address="<its ip>")
                    for rank in range(spec.nodes)]  # fmt: skip
        if instances and not (kept and kept[0]):  # node 0 new: where its cloud publishes ports
            from launcher.state.served import ServedDB

            ServedDB().put_public(job.job_id, instances[0].public)
        made = iter([instance_entry(inst) for inst in instances])  # pinned per instance
        if kept:  # each rank keeps its host, or takes the next new one (addresses re-formed)
            return [HostEntry.from_record(record) if record else next(made) for record in kept]
        return list(made)

    def _beside_kept(
        self, job: JobInput, kept: tuple[str, ...], dry_run: bool
    ) -> tuple[str | None, PeerPorts | None]:
        """A replacement's region (the kept hosts'), and the job's hosts open to each other
        on the cloud's firewall (the kept ones' addresses among them)."""
        from launcher.remote.hosts import HostEntry
        from launcher.targets.cloud.firewall import kept_region, peers_for

        region = kept_region(self.kind, kept) if kept and not dry_run else None
        addresses = [HostEntry.from_record(record).address for record in kept if record]
        return region, peers_for(job.loaded.spec, job.job_id, addresses)

    def plan_for(
        self,
        job: JobInput,
        request: LaunchRequest,
        layout: NodeLayout,
        image: ImageDefinition | None,
        report: Callable[[str], None] = say,
    ) -> Plan:
        """The hosts' price, once rented, goes with the plan (a notification's cost so far),
        and a recovery's resume checkpoint once `resume` has named it."""
        if self.price is not None:
            job = replace(job, sources=replace(job.sources, price_per_hour=self.price))
        if self._resumed is not None:
            request = replace(request, resume_from=self._resumed[0])
        return super().plan_for(job, request, layout, image, report)

    def hand_over(self) -> list[str]:
        if self.rent is None:
            return []
        self.rent.keep()
        return sorted(self.rent.made)

    def release(self, job: JobRecord, why: str) -> list[str]:
        """Terminate every host of the job that its cloud still runs; lines for what could
        not be (the user's `gpujob down` then)."""
        import contextlib

        from launcher.clouds.registry import get_provider
        from launcher.state.hosts import HostsDB
        from launcher.targets.cloud.hosts import end_connection

        provider = get_provider(self.kind)
        db, failures = HostsDB(), []
        for host in job_hosts(job):
            if host.instance_id is None:
                continue
            try:
                try:
                    status = provider.describe(host.instance_id).status
                    gone = status in ("terminated", "terminating")
                except GpujobError:  # the cloud's API failing: terminate it all the same
                    gone = False
                if not gone:
                    provider.terminate(host.instance_id)
                    say(f"terminated {host.name} ({provider.name} {host.instance_id}): {why}")
            except GpujobError as error:
                failures.append(f"could not terminate {host.name} ({host.instance_id}): "
                                f"{error.one_line()}; run `gpujob down {host.name}`")  # fmt: skip
                continue
            if db.host(host.name) is not None:
                db.update(host.name, status="terminated")
            with contextlib.suppress(OSError):  # its SSH master ends now, not at its keepalive
                end_connection(Instance(provider.name, host.instance_id, host.name, "terminated",
                                        ip=host.address, ssh_port=host.port,
                                        ssh_user=host.user or "root"))  # fmt: skip
        from launcher.targets.cloud.firewall import remove_unused

        # the job's firewall, where no host uses it now; not waited for (a recovery renting
        # again goes on at once): one its terminating hosts still hold goes at `down` or
        # the next multi-node launch
        remove_unused(provider, say, hurry=lambda: True)
        sweep = getattr(provider, "sweep_made", None)  # the job's overlay, volume (Vast)
        if sweep is not None and not failures:
            with contextlib.suppress(GpujobError):  # `down` sweeps it otherwise
                for line in sweep(False):
                    say(line)
        for line in failures:
            say(line)
        return failures


def _keep_can_end(kind: str, request: LaunchRequest, job: JobInput) -> None:
    """A keep window (the flag's or the spec's) on hosts that can end themselves only with
    the user's key there: refused before renting unless --autostop-key-on-host allows it."""
    from launcher.spec.keep import keep_window
    from launcher.targets.cloud.keep import check_keep

    window = keep_window(request.keep_on_failure, job.loaded.spec.keep_on_failure)
    check_keep(kind, request.autostop_key_on_host, window)


def _runs_before_rent(job: JobInput) -> None:
    """The job's run folder in the bucket is its own (storage/runs.py), checked from here
    before anything is rented: a refusal after renting would cost a boot. Its notes are said
    once, at the start, where every target says them."""
    from launcher.storage.preflight import sync_target
    from launcher.storage.runs import check_run

    target = sync_target(job.loaded)
    if target is not None:
        check_run(job.loaded.spec, target, job.job_id, lambda _: None)
