"""`gpujob up`: rent GPU hosts (`targets.cloud.hosts`: the offers, the budget, the launch, the
bootstrap), print them and hand them over; or (`--host`) make a machine you have ready.

An error, Ctrl-C, SIGTERM or SIGHUP before the hosts are printed terminates them (the
command's `Rent`); the command then exits 1, or 128 + the signal's number.
"""

from __future__ import annotations

import click

from launcher.bootstrap import Bootstrapped, bootstrap
from launcher.errors import ExitCode, UsageError
from launcher.remote.keys import public_key
from launcher.state.readonly import HostsView
from launcher.targets.cloud.hosts import (
    UpOptions,
    host_profile,
    launch_all,
    offers_for,
    say,
)
from launcher.targets.cloud.offers_view import bid_words
from launcher.targets.cloud.rent import Rent, renting


def up(options: UpOptions) -> int:
    """An error, Ctrl-C, SIGTERM or SIGHUP before the hosts are printed terminates them
    (targets.cloud.rent); the command then exits 1, or 128 + the signal's number."""
    with renting("up") as rent:
        return _up(options, rent)


def _up(options: UpOptions, rent: Rent) -> int:
    if options.image and not options.dry_run:  # before the first cloud call
        from launcher.targets.cloud.before_rent import check_registry

        check_registry(options.image, say)
    provider, request, offers, db, share = offers_for(options)
    if options.dry_run:
        say(
            f"dry run: would launch {options.count} x {offers[0].instance_type} in "
            f"{offers[0].region} at ${offers[0].price_per_hour:.2f}/h each{bid_words(offers[0])}; "
            "nothing started"
        )
        return ExitCode.OK
    if not options.yes:
        click.confirm(f"launch {options.count} x {offers[0].instance_type} at "
                      f"${offers[0].price_per_hour:.2f}/h each{bid_words(offers[0])}?",
                      abort=True, err=True)  # fmt: skip
    fresh = offers if options.yes else None  # a confirmation may have taken minutes
    made = launch_all(provider, request, options, public_key(), db, rent, share, fresh)
    for inst in made:
        click.echo(f"{inst.name}\t{inst.provider}\t{inst.id}\t{inst.ssh_user}@{inst.ip}:"
                   f"{inst.ssh_port}\t${inst.price_per_hour or 0:.2f}/h")  # fmt: skip
    rent.keep()
    return ExitCode.OK


def up_static(host: str, options: UpOptions, as_json: bool = False) -> int:
    """`gpujob up --host NAME|user@addr[:port]`: a machine the user already has; nothing is
    rented, the host is only made ready (and checked again on every call)."""
    from launcher.clouds.registry import runtime_of
    from launcher.remote.hosts import connect, resolve_host
    from launcher.targets.cloud.autostop import refuse_on_static_host

    refuse_on_static_host(options)
    if options.spot:
        raise UsageError("--spot is for hosts gpujob rents; --host names a machine you have, "
                         "which no cloud can take back",
                         "leave out --spot: it applies to a host `gpujob up GPU --provider "
                         "vast` rents")  # fmt: skip
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
