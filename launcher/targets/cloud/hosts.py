"""Renting GPU hosts (`gpujob up`, `submit --up`): the offers within the budget, the launch,
SSH, the bootstrap (the `up` command is commands/up.py; `down` commands/down.py).

`up` records each host before its launch call, so nothing it starts can be forgotten: a
failed or interrupted `up` (Ctrl-C, SIGTERM, SIGHUP: targets.cloud.rent) terminates what it
made, and one killed outright leaves a row that the next `up` or `down --all` reconciles with the
cloud's tagged instances. Messages go to stderr, tables
to stdout. rich is imported inside the functions that draw.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from launcher.bootstrap import Bootstrapped, HostProfile, bootstrap
from launcher.clouds.base import (
    STOP,
    GpuRequest,
    Instance,
    Offer,
    Provider,
    Stopped,
    instance_name,
    launch_cheapest,
    no_offers,
    parse_gpu_request,
)
from launcher.clouds.fleet import OfferBook, StatusBoard
from launcher.errors import UsageError
from launcher.remote.keys import public_key
from launcher.state.hosts import HostsDB
from launcher.state.readonly import HostsView
from launcher.targets.cloud.interrupts import cleaning
from launcher.targets.cloud.offers_view import offers_table
from launcher.targets.cloud.overlay import with_overlay_address
from launcher.targets.cloud.reconcile import Reconciliation, reconcile, record
from launcher.targets.cloud.rent import Rent, settle

if TYPE_CHECKING:
    from launcher.clouds.lambda_firewall import PeerPorts
    from launcher.spec.volume import VolumeSpec


@dataclass(frozen=True)
class UpOptions:
    gpu: str
    provider: str = "lambda"
    count: int = 1
    max_price: float | None = None
    region: str | None = None
    disk: int = 0
    yes: bool = False
    dry_run: bool = False
    timeout: float = 1200.0
    allow_cpu: bool = False
    image: str | None = None
    bootstrap: bool = True
    filesystem: str | None = None
    volume: VolumeSpec | None = None
    """A spec's resources.volume: Vast only."""
    one_network: bool = False
    """The hosts must reach each other (`--one-network`, a job of several nodes): on Vast,
    one physical cluster and an overlay network (clouds.vast_overlay)."""
    max_cost: float | None = None
    """The budget (`--max-cost`); None reads the user config's `budget.max_cost`."""
    max_duration_s: float | None = None
    """The job's time limit (`submit --up`): with the autostop window, the rental's bound."""
    autostop_s: float | None = None
    """The autostop window in seconds (`up --autostop`, a spec's resources.autostop)."""
    keep_s: float | None = None
    """`--keep-on-failure`: a failed job's hosts bill this long after it (the budget's tail
    is the longer of it and the autostop window)."""
    autostop_stop: bool = False
    """Autostop stops the host where the cloud can (`--autostop-stop`, `down: false`)."""
    autostop_key_on_host: bool = False
    """The user's opt-in to their Lambda key in a 0600 file on the host (targets.cloud.autostop)."""
    spot: bool = False
    """Interruptible hosts at a bid (`up --spot`, a spec's resources.use_spot): Vast only."""
    renting: str = "up"
    """The command renting (`up`, `submit --up`), as the autostop holds name it."""
    instance_image: str | None = None
    """What the instance is made of, on a cloud whose host is the job's image (Vast)."""
    offers_on_stderr: bool = False
    """`submit --up`: stdout is the job's (its plan, its `--json`), the offers go beside
    the progress lines."""
    peers: PeerPorts | None = None
    """A multi-node job's hosts open to each other where the cloud's firewall would block
    them (targets.cloud.firewall)."""
    runtime: str = "auto"
    """The job's runtime (`submit --up --runtime bare`): bare on a host with Docker too, so
    bootstrap readies what a bare job needs there (uv for its environment)."""
    ports: tuple[int, ...] = ()
    """The job's `ports:`, published by the cloud where it publishes ports (Vast:
    clouds.vast_ports); elsewhere they are reached over SSH only."""


def say(text: str) -> None:
    click.echo(f"gpujob: {text}", err=True)


def launch_hosts(options: UpOptions, rent: Rent | None) -> list[Instance]:
    """`up` for `submit --up`, inside its `rent.renting()` (`rent`): the offers are shown,
    nothing is asked (the submit is the request) and the running hosts are returned, still
    the rent's until the job starts; a dry run launches none (and has no rent)."""
    provider, request, offers, db, share = offers_for(options)
    if options.dry_run:
        plan = getattr(provider, "peers_plan", None)  # a cloud whose firewall needs opening
        if plan is not None and options.peers is not None:
            say(plan(options.peers))
        return []
    if rent is None:
        raise RuntimeError("launching hosts outside rent.renting(): nothing would undo them")
    from launcher.targets.cloud.firewall import arm

    arm(provider, options.peers)
    publish = getattr(provider, "publish_ports", None)
    if publish is not None:  # none: an earlier launch's are not this one's
        publish(options.ports)
    return launch_all(provider, request, options, public_key(), db, rent, share, offers)


def offers_for(
    options: UpOptions,
) -> tuple[Provider, GpuRequest, list[Offer], HostsDB, float | None]:
    """The offers, cheapest first, once the budget allows the cheapest; the request comes
    back capped so a launch falling back to a dearer offer stays within the budget, with
    each host's share of the budget (None without one)."""
    from launcher.targets.cloud.autostop import start_bound_s
    from launcher.targets.cloud.before_rent import check_spot
    from launcher.targets.cloud.cost import budget_for, clear_cost, rental_bound, require_bound

    check_spot(options.provider, options.spot)  # before any cloud call
    request = parse_gpu_request(options.gpu, min_disk_gb=options.disk, max_price=options.max_price,
                                region=options.region, spot=options.spot)  # fmt: skip
    if options.count < 1:
        raise UsageError("--count must be at least 1")
    budget = budget_for(options.max_cost)
    bound = rental_bound(start_bound_s(options.timeout), options.max_duration_s,
                         options.autostop_s, options.keep_s)  # fmt: skip
    require_bound(budget, bound)  # before any cloud call
    from launcher.targets.cloud.autostop import announce, check_autostop, check_host_api

    check_autostop(options)  # before any cloud call too
    _check_filesystem_name(options.filesystem)
    from launcher.clouds.registry import get_provider

    provider = get_provider(options.provider)
    check_host_api(provider, options)  # before any cloud call
    announce(options, say)
    if options.filesystem:
        if not hasattr(provider, "use_filesystem"):
            raise UsageError(f"--filesystem (resources.filesystem) is for Lambda; "
                             f"{provider.name} has none",
                             "leave it out, or use --provider lambda")  # fmt: skip
        made = provider.use_filesystem(options.filesystem, request if options.yes else None,
                                       options.dry_run)  # fmt: skip
        if made:
            say(made)
    if options.volume is not None:
        if not hasattr(provider, "use_volume"):
            raise UsageError(f"resources.volume is for Vast; {provider.name} has none",
                             "leave it out, or rent on Vast")  # fmt: skip
        say(provider.use_volume(options.volume))
    db = hosts_db(options.dry_run)
    reconciled(provider, db, options.dry_run)
    offers = provider.offers(request)
    if not offers:
        raise no_offers(provider.name, request)
    offers_table(offers, on_stderr=options.offers_on_stderr)
    cost = clear_cost(budget, options.count, offers[0].price_per_hour, bound)
    if cost.line:
        say(cost.line)
    if cost.max_price is not None:
        cap = min(cost.max_price, request.max_price or cost.max_price)
        request = dataclasses.replace(request, max_price=cap)
    make = getattr(provider, "make_filesystem", None)  # cleared: a missing one made now
    made = make() if make is not None and not options.dry_run else None
    if made:
        say(made)
    return provider, request, offers, db, cost.share


def _check_filesystem_name(name: str | None) -> None:
    """`--filesystem` as Lambda takes a name (the spec's field is checked as it loads)."""
    import re

    from launcher.spec.job import FILESYSTEM_NAME

    if name is not None and not re.match(FILESYSTEM_NAME, name):
        raise UsageError(f"--filesystem {name}: not a Lambda filesystem name",
                         "a letter first, then letters, digits and -; 60 at most")  # fmt: skip


def launch_all(provider: Provider, request: GpuRequest, options: UpOptions, key: str,
                db: HostsDB, rent: Rent, share: float | None = None,
                offers: list[Offer] | None = None) -> list[Instance]:  # fmt: skip
    """Launch `count` hosts, one purchase at a time (Lambda: one launch per 12 s), from one
    search shared by the launches (`offers`: the one just shown; read again after a
    refusal), and wait for them together. All or nothing: at the first failure or signal
    `rent` terminates what was launched, then the workers stop at their next wait.
    `share`: each host's share of the budget, recorded for `status`."""
    from concurrent.futures import FIRST_EXCEPTION, Future, wait

    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from launcher.clouds.reach import wait_for_ssh

    rent.bind(provider, db, end_connection)
    names = [instance_name(request.gpu.name) for _ in range(options.count)]
    deadline = time.monotonic() + options.timeout
    buying = threading.Lock()
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=Console(file=sys.stderr), transient=False)  # fmt: skip

    def show(text: str, task: Any = None) -> None:
        """A host's progress: drawn in place on a terminal; elsewhere (a pipe, a log), where
        rich draws only the last state, also printed as a line."""
        if task is not None:
            progress.update(task, description=text)
            if progress.console.is_terminal:
                return
            text = f"gpujob: {text}"
        progress.console.print(text, soft_wrap=True, markup=False, highlight=False)

    def report(line: str) -> None:  # a bootstrap step's result; the next starts only if wanted
        show(line)
        if STOP.is_set():
            raise Stopped("interrupted")

    def one(name: str) -> Instance:
        task = progress.add_task(f"{name}: waiting to launch")

        def buy() -> Instance:
            show(f"{name}: launching on {provider.name}", task)
            return launch_cheapest(provider, request, name, key, options.instance_image, book)

        if share is not None:
            db.set_budget(name, share)
        with buying:
            inst = rent.launch(name, request.label, buy)
        show(f"{name}: {provider.name} {inst.id} booting", task)
        inst = wait_running(inst.id, max(1.0, deadline - time.monotonic()))
        rent.update(name, inst, "booting")
        show(f"{name}: waiting for SSH on {inst.ip}:{inst.ssh_port}", task)
        wait_for_ssh(str(inst.ip), int(inst.ssh_port or 22), deadline)
        if options.bootstrap:
            show(f"{name}: bootstrapping {inst.ip}:{inst.ssh_port}", task)
            bootstrap_instance(provider, inst, options, report)
            inst = with_overlay_address(provider, inst)  # where its peers reach it, if apart
            from launcher.targets.cloud.autostop import record

            record(db, provider, inst, options)  # its watcher runs: `status` shows it
            if options.autostop_s is not None:
                rent.hold(name)  # held until the hand-over (targets.cloud.rent)
        rent.update(name, inst, "running")
        show(f"{name}: ready at {inst.ip}:{inst.ssh_port}", task)
        return inst

    board = StatusBoard(provider) if options.count > 1 else None
    wait_running = board.wait_until_running if board else provider.wait_until_running
    pool = ThreadPoolExecutor(options.count)
    futures: list[Future[Instance]] = []
    try:
        group = getattr(provider, "group", None)  # nodes on one network (Vast: an overlay)
        if group is not None and options.one_network:
            request, offers = group(request, options.count), None  # one cluster's offers
        book = OfferBook(provider, request, getattr(provider, "single_use_offers", False), offers)
        with progress:
            futures = [pool.submit(one, name) for name in names]
            wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f.exception() for f in futures if f.done() and f.exception()), None)
        if failed is not None:
            raise failed
        if options.peers is not None:  # the addresses known: the job's firewall opened
            from launcher.targets.cloud.firewall import open_between

            open_between(provider, [f.result() for f in futures], say)
        return [f.result() for f in futures]
    except BaseException as error:
        # Ctrl-C, SIGTERM and SIGHUP land here too, in the main thread (targets.cloud.interrupts). A
        # launch in flight is waited for, so that what it makes is terminated too; a worker
        # further on stops at its next wait, or when its terminated host's connection ends.
        with cleaning():
            STOP.set()
            rent.undo(interrupted=isinstance(error, KeyboardInterrupt))
            settle(futures)
            drop_network(provider)
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if all(f.done() for f in futures):  # else a signal cut the wait short: we are ending
            STOP.clear()


def drop_network(provider: Provider) -> None:
    """The network a failed multi-node launch made (a Vast overlay), deleted once its
    instances are terminated; a failure is said, and `down` deletes it later."""
    from launcher.errors import GpujobError
    from launcher.targets.cloud.rent import tell

    drop = getattr(provider, "drop_overlay", None)
    if drop is None:
        return
    try:
        line = drop()
    except GpujobError as error:
        tell(f"could not delete the overlay network: {error.one_line()}; `gpujob down --all` "
             "deletes it")  # fmt: skip
        return
    if line:
        tell(line)


def host_profile(provider_runtime: str, options: UpOptions) -> HostProfile:
    bare = "bare" in (provider_runtime, options.runtime)
    return HostProfile(runtime="bare" if bare else "docker",
                       allow_cpu=options.allow_cpu, min_disk_gb=options.disk,
                       image=options.image)  # fmt: skip


def bootstrap_instance(provider: Provider, inst: Instance, options: UpOptions,
                       report: Callable[[str], None]) -> Bootstrapped:  # fmt: skip
    """Log in with the key registered at launch and make the host ready. The first contact
    pins the host's key for this instance: an address that served an earlier machine is
    met as the new one it is (remote.hostkeys), and a later change is refused."""
    from launcher.remote.hosts import connect, instance_entry
    from launcher.targets.cloud.autostop import setup_for

    conn = connect(instance_entry(inst))
    try:
        runtime = getattr(provider, "runtime", "docker")
        profile = host_profile(runtime, options)
        profile = dataclasses.replace(profile, autostop=setup_for(provider, inst, options))
        return bootstrap(conn, inst.name, profile, report)
    finally:
        conn.close()


def hosts_db(dry_run: bool) -> HostsDB:
    """The hosts db to record in, or for a dry run a read-only view (creates nothing)."""
    return HostsView() if dry_run else HostsDB()


def reconciled(provider: Provider, db: HostsDB, dry_run: bool,
                foreign: bool = True) -> Reconciliation:  # fmt: skip
    """The db squared with the cloud's tags; a dry run says what it would change. With
    `foreign`, another owner's instances are listed as left alone."""
    found = reconcile(provider, db)
    if not dry_run:
        record(db, found)
    for line in found.lines(would=dry_run, foreign=foreign):
        say(line)
    return found


def end_connection(inst: Instance) -> None:
    """End gpujob's master SSH connection to a host that is gone (it would wait out its
    keepalives otherwise) and drop its pinned keys: its address will serve another machine."""
    from launcher.paths import known_hosts_file
    from launcher.remote.hostkeys import KnownHosts, instance_key

    instance = instance_key(inst.provider, inst.id)
    KnownHosts(known_hosts_file()).forget_instance(instance)
    if not inst.ip:
        return
    from launcher.remote.openssh import Endpoint, stop_masters

    port = int(inst.ssh_port or 22)
    stop_masters(endpoints=[Endpoint(inst.name, str(inst.ip), port, inst.ssh_user, (),
                                     instance=instance)])  # fmt: skip
