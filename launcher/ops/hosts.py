"""`gpujob up` and `gpujob down`: rent GPU hosts, wait until SSH answers, give them back.

`up` records each host before its launch call, so nothing it starts can be forgotten: a
failed `up` terminates what it made, and one cut short leaves a row that the next `up` or
`down --all` reconciles with the cloud's tagged instances. Messages go to stderr, tables
to stdout. rich is imported inside the functions that draw.
"""

from __future__ import annotations

import secrets
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import click

from launcher.bootstrap import Bootstrapped, HostProfile, bootstrap
from launcher.errors import ExitCode, GpujobError, UsageError
from launcher.ops.reconcile import reconcile, record
from launcher.providers.base import (
    STOP,
    TAG,
    GpuRequest,
    Instance,
    LostAnswer,
    Offer,
    Provider,
    launch_cheapest,
    no_offers,
    parse_gpu_request,
)
from launcher.remote.keys import public_key, user_key
from launcher.state.hosts import HostsDB
from launcher.state.readonly import HostsView


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


def say(text: str) -> None:
    click.echo(f"gpujob: {text}", err=True)


def offers_table(offers: list[Offer], shown: int = 10) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(offers)} offer(s), cheapest first")
    for column in ("provider", "type", "GPUs", "region", "$/hour", "disk GB"):
        table.add_column(column)
    for o in offers[:shown]:
        table.add_row(o.provider, o.instance_type, f"{o.gpu_count}x {o.gpu_name}", o.region,
                      f"{o.price_per_hour:.2f}", f"{o.disk_gb:.0f}")  # fmt: skip
    Console(file=sys.stdout, width=110).print(table)


def up(options: UpOptions) -> int:
    provider, request, offers, db = _offers(options)
    if options.dry_run:
        say(
            f"dry run: would launch {options.count} x {offers[0].instance_type} in "
            f"{offers[0].region} at ${offers[0].price_per_hour:.2f}/h each; nothing started"
        )
        return ExitCode.OK
    if not options.yes:
        click.confirm(f"launch {options.count} x {offers[0].instance_type} at "
                      f"${offers[0].price_per_hour:.2f}/h each?", abort=True, err=True)  # fmt: skip
    made = _launch_all(provider, request, options, public_key(), db)
    for inst in made:
        click.echo(f"{inst.name}\t{inst.provider}\t{inst.id}\t{inst.ssh_user}@{inst.ip}:"
                   f"{inst.ssh_port}\t${inst.price_per_hour or 0:.2f}/h")  # fmt: skip
    return ExitCode.OK


def launch_hosts(options: UpOptions) -> list[Instance]:
    """`up` for `submit --up`: the offers are shown, nothing is asked (the submit is the
    request) and the running hosts are returned; a dry run launches none."""
    provider, request, _, db = _offers(options)
    if options.dry_run:
        return []
    return _launch_all(provider, request, options, public_key(), db)


def _offers(options: UpOptions) -> tuple[Provider, GpuRequest, list[Offer], HostsDB]:
    request = parse_gpu_request(options.gpu, min_disk_gb=options.disk,
                                max_price=options.max_price, region=options.region)  # fmt: skip
    if options.count < 1:
        raise UsageError("--count must be at least 1")
    from launcher.providers.registry import get_provider

    provider = get_provider(options.provider)
    if options.filesystem:
        if not hasattr(provider, "use_filesystem"):
            raise UsageError(f"--filesystem is for Lambda; {provider.name} has none",
                             "leave it out, or use --provider lambda")  # fmt: skip
        provider.use_filesystem(options.filesystem)
    db = _hosts_db(options.dry_run)
    _reconciled(provider, db, options.dry_run)
    offers = provider.offers(request)
    if not offers:
        raise no_offers(provider.name, request)
    offers_table(offers)
    return provider, request, offers, db


def _launch_all(provider: Provider, request: GpuRequest, options: UpOptions, key: str,
                db: HostsDB) -> list[Instance]:  # fmt: skip
    """Launch `count` hosts, one purchase at a time (Vast: search again after each; Lambda:
    one launch per 12 s), and wait for them together. All or nothing."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    names = [f"{TAG}{request.gpu.name}-{secrets.token_hex(3)}" for _ in range(options.count)]
    deadline = time.monotonic() + options.timeout
    buying = threading.Lock()
    made: dict[str, Instance] = {}
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=Console(file=sys.stderr), transient=False)  # fmt: skip

    def one(name: str) -> Instance:
        task = progress.add_task(f"{name}: waiting to launch")
        with buying:
            progress.update(task, description=f"{name}: launching")
            db.intend(name, provider.name, request.label)
            try:
                inst = launch_cheapest(provider, request, name, key)
            except LostAnswer:
                raise  # the row stays `launching`: the cloud may hold it under its tag
            except BaseException:
                db.update(name, status="failed")
                raise
            made[name] = inst
            db.update(name, inst)
        progress.update(task, description=f"{name}: {provider.name} {inst.id} booting")
        inst = provider.wait_until_running(inst.id, max(1.0, deadline - time.monotonic()))
        db.update(name, inst, status="booting")
        progress.update(task, description=f"{name}: waiting for SSH on {inst.ip}:{inst.ssh_port}")
        from launcher.providers.reach import wait_for_ssh

        wait_for_ssh(str(inst.ip), int(inst.ssh_port or 22), deadline)
        if options.bootstrap:
            progress.update(task, description=f"{name}: bootstrapping {inst.ip}:{inst.ssh_port}")
            bootstrap_instance(
                provider,
                inst,
                options,
                lambda line: progress.console.print(
                    line, soft_wrap=True, markup=False, highlight=False
                ),
                fresh=True,
            )
        db.update(name, inst, status="running")
        progress.update(task, description=f"{name}: ready at {inst.ip}:{inst.ssh_port}")
        return inst

    pool = ThreadPoolExecutor(options.count)
    try:
        with progress:
            futures = [pool.submit(one, name) for name in names]
            errors = [f.exception() for f in futures]
        pool.shutdown()
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise failed
        return [f.result() for f in futures]
    except BaseException:
        # Ctrl-C lands here, in the main thread: the workers stop polling at their next
        # wait, and only then is everything they launched terminated (a launch in flight
        # finishes first, so it is undone too).
        STOP.set()
        pool.shutdown(wait=True, cancel_futures=True)
        _undo(provider, names, made, db)
        raise
    finally:
        STOP.clear()


def host_profile(provider_runtime: str, options: UpOptions) -> HostProfile:
    return HostProfile(runtime="bare" if provider_runtime == "bare" else "docker",
                       allow_cpu=options.allow_cpu, min_disk_gb=options.disk,
                       image=options.image)  # fmt: skip


def bootstrap_instance(provider: Provider, inst: Instance, options: UpOptions,
                       report: Callable[[str], None], *, fresh: bool) -> Bootstrapped:  # fmt: skip
    """Log in with the key registered at launch and make the host ready. A `fresh` instance's
    address may have served an earlier machine: its old pin is dropped before the first
    contact pins the new key (never on a later contact, where a change is refused)."""
    from launcher.paths import known_hosts_file
    from launcher.providers.ssh import HostEntry, connect
    from launcher.remote.hostkeys import KnownHosts, host_id

    port = int(inst.ssh_port or 22)
    if fresh:
        KnownHosts(known_hosts_file()).forget(host_id(str(inst.ip), port))
        _end_connection(inst)  # one to an earlier machine at this address
    entry = HostEntry(inst.name, str(inst.ip), port, inst.ssh_user, str(user_key()))
    conn = connect(entry)
    try:
        runtime = getattr(provider, "runtime", "docker")
        return bootstrap(conn, inst.name, host_profile(runtime, options), report)
    finally:
        conn.close()


def up_static(host: str, options: UpOptions, as_json: bool = False) -> int:
    """`gpujob up --host NAME|user@addr[:port]`: a machine the user already has; nothing is
    rented, the host is only made ready (and checked again on every call)."""
    from launcher.providers.registry import runtime_of
    from launcher.providers.ssh import connect, resolve_host

    entry = resolve_host(host)
    rented = HostsView().host(entry.name)  # a lookup: never creates the db
    profile = host_profile(runtime_of(rented.provider) if rented else "docker", options)
    if options.dry_run:
        from launcher.bootstrap.steps import STEPS

        say(f"dry run: would check {entry.name} ({entry.user or 'you'}@{entry.address}:"
            f"{entry.port or 22}) and fix what is missing: "
            f"{', '.join(step.__name__ for step in STEPS)}")  # fmt: skip
        return ExitCode.OK
    conn = connect(entry)
    try:
        done = bootstrap(conn, entry.name, profile, say)
    finally:
        conn.close()
    if as_json:
        click.echo(bootstrap_json(done))
    else:
        say(done.summary())
    return ExitCode.OK


def bootstrap_json(done: Bootstrapped) -> str:
    import json

    return json.dumps({"host": done.host, "changed": done.changed,
                       "steps": [r._asdict() for r in done.results],
                       "facts": done.found.as_json()}, indent=2)  # fmt: skip


def _undo(provider: Provider, names: list[str], made: dict[str, Instance],
          db: HostsDB) -> None:  # fmt: skip
    """Terminate what this `up` created. An instance whose launch answer was lost has no id
    here: look for its tag. If even that fails, its row stays `launching` for reconcile."""
    missing = [n for n in names if n not in made]
    if missing:
        try:
            for inst in provider.list():
                if inst.name in missing:
                    made[inst.name] = inst
                    db.update(inst.name, inst)
        except GpujobError as error:
            say(f"could not look for instances of a lost launch answer: {error.one_line()}")
            say("run `gpujob down --all` to remove anything left")
    for name, inst in made.items():
        try:
            provider.terminate(inst.id)
            db.update(name, status="terminated")
            say(f"terminated {name} ({provider.name} {inst.id}) after the failed up")
        except GpujobError as error:
            say(f"could not terminate {name} ({inst.id}): {error.one_line()}")


def down(reference: str | None, everything: bool, dry_run: bool,
         timeout: float = 300.0) -> int:  # fmt: skip
    """Terminate one host (name, name without the tag, or instance id) or every gpujob host,
    then read each back until the cloud says it is going or gone. A dry run reads the clouds
    and the db, changes neither, and prints what it would do, in order."""
    from launcher.ops.status import cancel_first
    from launcher.providers.registry import configured, get_provider

    if bool(reference) == everything:
        raise UsageError("name one HOST or pass --all", "see `gpujob down --help`")
    db = _hosts_db(dry_run)
    clouds = sorted({r.provider for r in db.hosts()} | set(configured()))
    targets: list[tuple[Provider, Instance]] = []
    for cloud in clouds:
        provider = get_provider(cloud)
        _reconciled(provider, db, dry_run)
        for inst in provider.list():
            if everything or reference in (inst.id, inst.name, inst.name.removeprefix(TAG)):
                targets.append((provider, inst))
    if not targets:
        if reference:
            raise GpujobError(f"no gpujob host {reference!r}", "`gpujob down --all` lists none")
        say("no gpujob hosts are running")
        return ExitCode.OK
    stop = cancel_first({inst.name for _, inst in targets}, dry_run=dry_run)
    if dry_run:
        for line in stop.lines():
            click.echo(line)
        for provider, inst in targets:
            click.echo(f"would terminate {inst.name} ({provider.name} {inst.id}, {inst.status}):"
                       f" {provider.name}.terminate({inst.id!r}), describe() until terminating,"
                       " its row marked terminated, its SSH connection ended")  # fmt: skip
        return ExitCode.OK
    stop.run()
    with ThreadPoolExecutor(min(8, len(targets))) as pool:
        results = list(pool.map(lambda t: _terminate(*t, db, timeout), targets))
    failures = [r for r in results if r]
    for line in failures:
        say(line)
    return ExitCode.FAILURE if failures else ExitCode.OK


def _hosts_db(dry_run: bool) -> HostsDB:
    """The hosts db to record in, or for a dry run a read-only view (creates nothing)."""
    return HostsView() if dry_run else HostsDB()


def _reconciled(provider: Provider, db: HostsDB, dry_run: bool) -> None:
    """The db squared with the cloud's tags; a dry run says what it would change."""
    found = reconcile(provider, db)
    if not dry_run:
        record(db, found)
    for line in found.lines(would=dry_run):
        say(line)


def _terminate(provider: Provider, inst: Instance, db: HostsDB, timeout: float) -> str | None:
    """Terminate and confirm; the failure as one line, or None."""
    from launcher.providers.base import poll_interval

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
    _end_connection(inst)
    click.echo(f"terminated {inst.name} ({provider.name} {inst.id}): {now.status}")
    return None


def _end_connection(inst: Instance) -> None:
    """End gpujob's master SSH connection to a host that is gone (it would wait out its
    keepalives otherwise) or whose address now serves another machine."""
    if not inst.ip:
        return
    from launcher.remote.openssh import Endpoint, stop_masters

    port = int(inst.ssh_port or 22)
    stop_masters(endpoints=[Endpoint(inst.name, str(inst.ip), port, inst.ssh_user, ())])
