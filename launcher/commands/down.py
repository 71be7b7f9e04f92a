"""`gpujob down`: give rented hosts back, ours only, each confirmed gone by its cloud.

The jobs still running there are cancelled first (their agents ship the last checkpoints and
logs); then each host is terminated and read back until the cloud says it is going, its row
marked, its master SSH connection ended and its pinned host keys dropped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import click

from launcher.clouds.base import Instance, Provider
from launcher.errors import ExitCode, GpujobError, UsageError
from launcher.state.hosts import HostsDB
from launcher.targets.cloud.hosts import end_connection, hosts_db, reconciled, say


def down(reference: str | None, everything: bool, dry_run: bool, timeout: float = 300.0,
         force: bool = False) -> int:  # fmt: skip
    """Terminate one host (name, name without the tag, or instance id) or every host of ours,
    then read each back until the cloud says it is going or gone. Another owner's instances
    are listed and left alone; naming one is refused unless `force`. A dry run reads the
    clouds and the db, changes neither, and prints what it would do, in order."""
    from launcher.clouds.registry import configured, get_provider
    from launcher.jobs.cancel import cancel_first
    from launcher.targets.cloud.reconcile import ENDING, named, not_ours

    if bool(reference) == everything:
        raise UsageError("name one HOST or pass --all", "see `gpujob down --help`")
    if force and everything:
        raise UsageError("--force goes with one HOST, never --all",
                         "another owner's instance is taken only by name")  # fmt: skip
    db = hosts_db(dry_run)
    of_job = None if everything else _job_hosts(db, str(reference))
    clouds = sorted({r.provider for r in db.hosts()} | set(configured()))
    targets: list[tuple[Provider, Instance]] = []
    providers: dict[str, Provider] = {}
    every: dict[str, Provider] = {}  # firewall rulesets: removed wherever none is used
    for cloud in clouds:
        provider = get_provider(cloud)
        found = reconciled(provider, db, dry_run, foreign=everything)
        mine = [i for i in found.ours if everything or _is(i, str(reference), of_job)]
        theirs = [] if everything else [i for i in found.foreign if named(i, str(reference))]
        if theirs and not force:
            raise not_ours(theirs[0])
        targets += [(provider, inst) for inst in mine + theirs]
        every[cloud] = provider
        if not [i for i in found.ours if i not in mine and i.status not in ENDING]:
            providers[cloud] = provider  # no instance of ours left running there after this
    if not targets:
        if reference:
            raise GpujobError(f"no gpujob host {reference!r}", "`gpujob down --all` lists none")
        say("no gpujob hosts of ours are running")
        _remove_keys(providers, db, dry_run)
        _remove_rulesets(every, dry_run)
        _sweep_networks(list(every.values()), dry_run)
        return ExitCode.OK
    stop = cancel_first({inst.name for _, inst in targets}, dry_run=dry_run)
    if dry_run:
        for line in stop.lines():
            click.echo(line)
        for provider, inst in targets:
            click.echo(f"would terminate {inst.name} ({provider.name} {inst.id}, {inst.status}):"
                       f" {provider.name}.terminate({inst.id!r}), describe() until terminating,"
                       " its row marked terminated, its SSH connection ended, its pinned"
                       " host keys dropped")  # fmt: skip
        _remove_keys(providers, db, dry_run, targets)
        _remove_rulesets(every, dry_run)
        _sweep_networks(list(every.values()), dry_run, targets)
        return ExitCode.OK
    stop.run()
    with ThreadPoolExecutor(min(8, len(targets))) as pool:
        results = list(pool.map(lambda t: _terminate(t[0], t[1], db, timeout), targets))
    failures = [r for r in results if r]
    for line in failures:
        say(line)
    _remove_keys(providers, db, dry_run)
    _remove_rulesets(every, dry_run)
    _sweep_networks(list(every.values()), dry_run)
    return ExitCode.FAILURE if failures else ExitCode.OK


def _is(inst: Instance, reference: str, of_job: set[str] | None) -> bool:
    from launcher.targets.cloud.reconcile import named

    return inst.name in of_job if of_job else named(inst, reference)


def _job_hosts(db: HostsDB, reference: str) -> set[str] | None:
    """`down JOB`: the hosts rented for the job (a kept failed job's, say), by name; None
    when `reference` names a host (a host's name wins) or no job with rented hosts."""
    from launcher.remote.hosts import HostEntry
    from launcher.state.readonly import JobsView

    if db.host(reference) is not None:
        return None
    from launcher.targets.base import target_for

    view = JobsView()  # a look: `down --dry-run` writes nothing
    job = view.job(reference)
    if job is None:
        return None
    names = {HostEntry.from_record(record).name for record in job.hosts}
    rented = sorted(name for name in names if db.host(name) is not None)
    if rented and not target_for(job).traits.rents_hosts:  # `submit --on HOST`: up's host
        raise UsageError(f"job {job.id} ran on {', '.join(rented)}, which it did not rent "
                         "(other jobs may use it): `down JOB` takes a job's own hosts only",
                         f"`gpujob down {rented[0]}` terminates that host, with every job "
                         "on it")  # fmt: skip
    for other in view.jobs(limit=200):  # a host the user ran another job on since
        shared = set(rented) & set(target_for(other).host_names(other))
        if other.id != job.id and not other.terminal and shared:
            raise UsageError(f"{min(shared)} also runs job {other.id}, not ended: `down "
                             f"{job.id}` takes only what job {job.id} alone uses",
                             f"`gpujob cancel {other.id}` first, or `gpujob down "
                             f"{min(shared)}` to take the host with it")  # fmt: skip
    return set(rented) or None


def _sweep_networks(
    providers: list[Provider], dry_run: bool, going: Sequence[tuple[Provider, Instance]] = ()
) -> None:
    """What gpujob made beside hosts (Vast: overlay networks, volumes with `delete: true`)
    that no host of ours uses any more, deleted (a dry run: as if `going` were gone); a
    failure is said."""
    gone = {inst.id for _, inst in going}
    for provider in providers:
        sweep = getattr(provider, "sweep_made", None)
        if sweep is None:
            continue
        try:
            lines = sweep(dry_run, gone)
        except GpujobError as error:
            say(f"could not clean {provider.name}'s overlay networks: {error.one_line()}")
            continue
        for line in lines:
            (click.echo if dry_run else say)(line)


def _remove_keys(
    providers: dict[str, Provider], db: HostsDB, dry_run: bool,
    going: Sequence[tuple[Provider, Instance]] = (),
) -> None:  # fmt: skip
    """The account SSH keys gpujob registered, removed from each cloud where no host of ours
    is left (a dry run: where none would be, `going` gone): `providers` holds only the clouds
    whose list shows none of ours staying, and the db's rows (a launch not listed yet) are
    asked too; a failure is said, and `down` goes on."""
    names = {inst.name for _, inst in going}
    for cloud, provider in providers.items():
        if any(r.name not in names for r in db.hosts(cloud)):
            continue  # a host of ours still runs there, reached with that key
        for line in provider.remove_added_keys(db, dry_run):
            (click.echo if dry_run else say)(line)


def _remove_rulesets(providers: dict[str, Provider], dry_run: bool) -> None:
    """gpujob's firewall rulesets that no running host of ours uses any more (a dry run:
    those unused now; the ones the terminations free go at the real `down`)."""
    from launcher.targets.cloud.firewall import remove_unused

    for provider in providers.values():
        remove_unused(provider, click.echo if dry_run else say, dry_run=dry_run)


def _terminate(provider: Provider, inst: Instance, db: HostsDB, timeout: float) -> str | None:
    """Terminate and confirm; the failure as one line, or None."""
    from launcher.clouds.base import poll_interval

    try:
        provider.terminate(inst.id)
        deadline = time.monotonic() + timeout
        while (now := provider.describe(inst.id)).status not in ("terminated", "terminating"):
            if time.monotonic() > deadline:
                return f"{inst.name} ({inst.id}) is still {now.status} after terminate"
            time.sleep(poll_interval())
    except GpujobError as error:
        return f"could not terminate {inst.name} ({inst.id}): {error.one_line()}"
    if db.host(inst.name) is not None:
        db.update(inst.name, status="terminated")
    end_connection(inst)
    click.echo(f"terminated {inst.name} ({provider.name} {inst.id}): {now.status}")
    return None
