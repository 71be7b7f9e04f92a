"""The job commands as functions: submit, logs, status, cancel. The CLI only parses and prints.

This is the apply side: it loads a spec, asks `plan/` for a Plan, shows it or carries it out
through `runtime/`, and records the job in the state db.
"""

from __future__ import annotations

import os
import secrets as random
import sys
import time
from dataclasses import dataclass
from typing import Any

from launcher.errors import UsageError
from launcher.ops import say
from launcher.ops.jobs import job_connections
from launcher.state.db import JobRecord, StateDB


@dataclass(frozen=True)
class SubmitOptions:
    spec_path: str
    sets: tuple[str, ...] = ()
    dry_run: bool = False
    as_json: bool = False
    detach: bool = False
    job_id: str | None = None
    on: tuple[str, ...] = ()
    up: str | None = None
    provider: str = "lambda"
    runtime: str = "auto"
    allow_cpu: bool = False
    disk: int = 0
    max_price: float | None = None
    max_cost: float | None = None
    autostop_key_on_host: bool = False
    recover: bool = False
    """`--recover`: recovery with its defaults where the spec has no `recovery:`."""
    attempt: int = 0
    """A recovery's restart number (ops/recover_loop.py): the job's record is reused."""
    resume_from: str | None = None
    """The checkpoint a recovery pulls onto the new head (GPUJOB_RESUME_FROM)."""
    before_start: Any = None
    """A recovery's step between placement and start: `before_start(plan, placement)`."""


def new_job_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{random.token_hex(2)}"


def submit(options: SubmitOptions) -> int:
    if options.max_cost is not None and not options.up:
        raise UsageError("--max-cost goes with --up (a rental's budget)",
                         "add --up GPU, or leave --max-cost out")  # fmt: skip
    if options.autostop_key_on_host and not options.up:
        raise UsageError("--autostop-key-on-host goes with --up (a rented host's autostop)",
                         "add --up GPU, or leave --autostop-key-on-host out")  # fmt: skip
    if options.up and not options.dry_run:
        # Every way out before the job has started (an error, a refusal, Ctrl-C, SIGTERM,
        # SIGHUP) terminates what --up rented; the job's start hands the hosts over.
        from launcher.ops.rent import renting

        with renting("submit --up"):
            return _submit(options, None)
    early = None
    slurm = any(value.startswith("slurm:") for value in options.on)
    if options.on and not options.up and not options.dry_run and not slurm:
        from launcher.ops.placement import EarlyContact
        from launcher.plan.placement import split_on

        early = EarlyContact(split_on(options.on))
    elif slurm and not options.dry_run:
        from launcher.ops.slurm import EarlyCluster

        early = EarlyCluster(options.on)
    try:
        return _submit(options, early)
    finally:
        if early is not None:
            early.close()


def _submit(options: SubmitOptions, early: Any) -> int:
    from launcher.agent import AGENT_MODULES, AGENT_SOURCE, INIT_LOCK_SOURCE
    from launcher.plan.build import JOB_ID, Sources, build_plan
    from launcher.plan.show import plan_json, plan_text
    from launcher.spec.image import load_image_definition
    from launcher.spec.load import load_job_spec
    from launcher.state.owner import user_name
    from launcher.storage.preflight import preflight

    loaded = load_job_spec(options.spec_path, options.sets)
    spec = loaded.spec
    _say_translation(loaded, options.dry_run)
    if spec.resources.use_spot and not options.up:  # only a rental is ever interruptible
        where = "the --on hosts" if options.on else "this machine"
        say(f"warning: {loaded.where('resources', 'use_spot')}: resources.use_spot has no "
            f"effect without --up (nothing is rented); the job runs on {where}")  # fmt: skip
    from launcher.ops.recover import policy_for

    policy = policy_for(options, loaded)  # refused before anything is rented
    if policy is not None and options.dry_run:
        events = ", ".join(policy.on)
        say(f"dry run: once the job runs, a recovery controller would follow it (up to "
            f"{policy.max_restarts} restart(s) on {events})")  # fmt: skip
    if loaded.workdir is not None and not loaded.workdir.is_dir():
        raise UsageError(f"{loaded.where('workdir')}: workdir: {loaded.workdir} is not a folder")
    secret_values = _secret_values(loaded)
    try:
        image = load_image_definition(spec.image, loaded.path.parent)
    except UsageError as err:
        raise UsageError(f"{loaded.where('image')}: image: {err.message}", err.hint) from None
    job_id = options.job_id or new_job_id(spec.name)
    if not JOB_ID.fullmatch(job_id):
        raise UsageError(
            f"--job-id {job_id!r}: a job id is letters, digits, `.`, `_` and `-` (up to 128)",
            "leave out --job-id to get a new one",
        )
    sources = Sources(
        workdir=str(loaded.workdir or ""),
        agent=str(AGENT_SOURCE),
        init_lock=str(INIT_LOCK_SOURCE),
        spec_where=loaded.where("run", "args"),
        agent_modules=AGENT_MODULES,
        user=user_name(),
        mounts_where={dst: loaded.where("file_mounts", dst) for dst in spec.file_mounts},
    )

    if any(value.startswith("slurm:") for value in options.on):  # queued on a cluster
        from launcher.ops.slurm import submit_to_slurm

        if options.up:
            raise UsageError("give --on slurm:NAME or --up, not both")
        return submit_to_slurm(options, loaded, image, job_id, secret_values, sources, early)

    def plan_for(target: Any, image: Any, report: Any = say) -> Any:
        sync = preflight(loaded, target, image, report)
        return build_plan(spec, target, job_id, secret_values, image, sources, sync,
                          follow=not options.detach, resume_from=options.resume_from)  # fmt: skip

    # A Vast instance IS a container of the job's image: the job runs in its environment as
    # it is; building another from the pins there would be slow and offline.
    in_image = options.up is not None and options.provider == "vast"
    if options.up and not options.dry_run:
        options = _clear_the_rent(options, loaded, image, in_image, plan_for)
    if in_image:
        placed = _placement(options, spec, None, up_image=image)
        image = None
    else:
        placed = _placement(options, spec, image, early=early, where=loaded.where("image"))
    target, connections = placed.target, placed.connections
    plan = plan_for(target, image)
    if options.dry_run:
        sys.stdout.write(plan_json(plan) if options.as_json else plan_text(plan))
        return 0
    from launcher.storage.preflight import check_before_start, env_dir

    try:
        check_before_start(loaded, plan, env_dir(target, image), connections, say, placed.facts)
        if options.before_start is not None:
            options.before_start(plan, placed)
        return _start(options, plan, loaded, connections, placed.records)
    finally:
        for conn in connections.values():
            conn.close()


def _clear_the_rent(
    options: SubmitOptions, loaded: Any, image: Any, in_image: bool, plan_for: Any
) -> SubmitOptions:
    """`--up`: every check this machine can make, before the first cloud call: the plan for
    placeholder hosts (as --dry-run builds it, merge guard included), the S3 remotes from
    here, the image, the disk budget. Returns the options with the disk an offer needs."""
    from dataclasses import replace

    from launcher.ops import placement
    from launcher.ops.before_rent import check_before_rent
    from launcher.plan.placement import image_reference
    from launcher.providers.ssh import HostEntry

    spec = loaded.spec
    entries = [HostEntry(name=f"<new {options.provider} host {rank}>", address="192.0.2.1")
               for rank in range(spec.nodes)]  # fmt: skip
    runtime = "bare" if in_image else options.runtime

    def rehearse() -> None:
        assumed = placement.remote_placement(
            spec, None if in_image else image, entries, runtime=runtime,  # type: ignore[arg-type]
            dry_run=True, provider=options.provider,
        )  # fmt: skip
        plan_for(assumed.target, None if in_image else image, lambda _: None)

    ref = image_reference(spec.image, image)
    cleared = check_before_rent(loaded, image, ref, options.disk, rehearse, say)
    return replace(options, disk=max(options.disk, cleared.min_disk_gb))


def _placement(
    options: SubmitOptions,
    spec: Any,
    image: Any,
    up_image: Any = None,
    early: Any = None,
    where: str = "image",
) -> Any:
    """Where the job runs: this machine, the `--on` hosts, or hosts `--up` rents now."""
    from launcher.ops import placement
    from launcher.plan.placement import node_hosts, split_on

    if options.on and options.up:
        raise UsageError("give --on or --up, not both")
    if not options.on and not options.up:
        from launcher.providers.local import local_connections, local_target

        target = local_target(spec, image, options.runtime, where)
        return placement.Placement(target, dict(local_connections()), list(target.hosts))
    if options.up:
        entries, provider = _rented_hosts(options, spec, up_image or image)
    else:
        from launcher.providers import ssh as ssh_hosts

        names = node_hosts(split_on(options.on), spec.nodes)
        entries, provider = [ssh_hosts.resolve_host(name) for name in names], "ssh"
    placed = placement.remote_placement(
        spec, image, entries, runtime=options.runtime, dry_run=options.dry_run,  # type: ignore[arg-type]
        provider=provider, early=early,
    )  # fmt: skip
    if placed.note:
        say(placed.note)
    return placed


def _rented_hosts(options: SubmitOptions, spec: Any, image: Any) -> tuple[list[Any], str]:
    """`--up GPU[:N]`: one host per node from `gpujob up`'s own launch (all or nothing);
    a dry run shows the offers and rents nothing."""
    from launcher.ops.hosts import UpOptions, launch_hosts
    from launcher.plan.placement import image_reference
    from launcher.providers.ssh import HostEntry, instance_entry

    autostop = spec.resources.autostop
    request = UpOptions(gpu=options.up or "", provider=options.provider, count=spec.nodes,
                        yes=True, dry_run=options.dry_run, allow_cpu=options.allow_cpu,
                        image=image_reference(spec.image, image), disk=options.disk,
                        max_price=options.max_price, max_cost=options.max_cost,
                        max_duration_s=spec.max_duration,
                        autostop_s=autostop.idle_minutes * 60 if autostop else None,
                        autostop_stop=bool(autostop and not autostop.down),
                        autostop_key_on_host=options.autostop_key_on_host,
                        spot=spec.resources.use_spot)  # fmt: skip
    if options.provider == "vast" and request.image:
        os.environ.setdefault("GPUJOB_VAST_IMAGE", request.image)  # the instance IS the image
    instances = launch_hosts(request)
    if options.dry_run:
        entries = [HostEntry(name=f"<new {options.provider} host {rank}>", address="<its ip>")
                   for rank in range(spec.nodes)]  # fmt: skip
        return entries, options.provider
    entries = [instance_entry(inst) for inst in instances]  # pinned per instance
    return entries, options.provider


def _start(
    options: SubmitOptions, plan: Any, loaded: Any, connections: dict[str, Any], hosts: list[str]
) -> int:
    from launcher.runtime.apply import apply_plan

    spec, job_id = loaded.spec, plan.job_id

    db = StateDB()
    taken = db.job(job_id) is not None and db.job(job_id).id == job_id  # type: ignore[union-attr]
    if taken and not options.attempt:
        raise UsageError(f"job id {job_id} is taken", "leave out --job-id to get a new one")
    say(f"job {job_id}: {spec.name}, {plan.world_size} rank(s) on {plan.provider}")
    record = JobRecord(
        id=job_id, name=spec.name, spec_path=str(loaded.path), provider=plan.provider,
        runtime=plan.runtime, hosts=hosts, node_dirs=plan.node_dirs,
        state="starting", exit_code=None, created_at=time.time(), ended_at=None,
        last_line=None, logs_to=plan.logs_to,
    )  # fmt: skip
    if options.attempt:
        db.restart_job(record)
    else:
        db.add_job(record)
    try:
        first_reads = apply_plan(plan, connections, say)
    except BaseException:
        db.update_job(job_id, "failed", exit_code=1, last_line="failed to start")
        raise
    from launcher.ops.rent import hand_over

    kept = hand_over()  # the job runs on the hosts --up rented: they outlive the command now
    db.update_job(job_id, "running")
    from launcher.ops.recover import policy_for, watch_over

    policy = policy_for(options, loaded)
    if policy is not None and not options.attempt:
        watch_over(job_id, options, policy)  # the controller, detached: it outlives us
        kept = []  # the controller answers for the hosts now
    elif policy is None and options.detach and not options.attempt:
        from launcher.ops.keeper import hand_to_keeper

        hand_to_keeper(db.job(job_id))  # nobody follows: one node failing must stop the rest
    if options.detach:
        say(f"detached; follow it with: gpujob logs {job_id} -f")
        print(job_id)
        return 0
    from launcher.ops.logs import logs

    conns = job_connections(db.job(job_id), connections)
    try:
        return logs(job_id, follow=True, connections=conns, first_reads=first_reads)
    finally:
        if kept:
            _hosts_stay(db, job_id, kept)


def _hosts_stay(db: StateDB, job_id: str, hosts: list[str]) -> None:
    """Following ended (Ctrl-C, SIGTERM, SIGHUP, a lost connection) with the job still
    running: its hosts are not terminated under it, and still cost money; say so."""
    from launcher.agent.states import TERMINAL

    job = db.job(job_id)
    if job is not None and job.state not in TERMINAL:
        down = f"gpujob down {hosts[0]}" if len(hosts) == 1 else "gpujob down HOST"
        say(f"its hosts keep running (and billing) for it: {', '.join(hosts)}; reattach "
            f"with `gpujob logs {job_id} -f`; `{down}` removes them")  # fmt: skip


def _say_translation(loaded: Any, dry_run: bool) -> None:
    """A SkyPilot task's fields as gpujob reads them: every one under `--dry-run`, the
    warnings (fields ignored) always."""
    translation = loaded.translation
    if translation is None:
        return
    say(f"{loaded.path}: a SkyPilot task, read as gpujob's spec")
    for line in translation.notes if dry_run else []:
        say(f"  {line}")
    for line in translation.warnings:
        say(f"  warning: {line}")


def _secret_values(loaded: Any) -> dict[str, str]:
    values = {}
    for index, name in enumerate(loaded.spec.secrets):
        if name not in os.environ:
            raise UsageError(
                f"{loaded.where('secrets', index)}: secrets: {name} is not set in your environment",
                f"export {name}=... before submitting (its value is never written to the spec,"
                " a command line or a log)",
            )
        values[name] = os.environ[name]
    return values
