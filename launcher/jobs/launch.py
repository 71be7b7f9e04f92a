"""A job's launch on any target: the spec loaded and checked, the job's id, secrets and image,
then the target's dry run (`Submission`: the object `--dry-run` prints) and the submission of
exactly that object. `submit` and the recovery controller both call `launch`, each with
explicit arguments.
"""

from __future__ import annotations

import dataclasses
import os
import secrets as random
import sys
import time
from typing import TYPE_CHECKING

from launcher.errors import ManyUsageErrors, UsageError
from launcher.jobs.served import record_served
from launcher.plan.recovery import Policy
from launcher.say import say, shown
from launcher.targets.base import BeforeStart, JobInput, LaunchRequest, Started, Target

if TYPE_CHECKING:
    from launcher.spec.load import LoadedSpec


def new_job_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{random.token_hex(2)}"


def launch(
    request: LaunchRequest, target: Target, before_start: BeforeStart | None = None
) -> Started | None:
    """Print the submission (a dry run: None) or carry it out; `before_start` runs between
    the placement and the start (a recovery's checkpoint pull)."""
    target.start_contact(request)  # the hosts contacted while the spec loads
    try:
        job = prepare(request, requeues=target.traits.requeues)
        if request.up:
            request = dataclasses.replace(request, up=gpus_to_rent(request.up, job.loaded),
                                          max_price=_max_price(request, job.loaded))  # fmt: skip
        submission = target.dryrun(job, request)
        if request.dry_run:
            sys.stdout.write(shown(submission.text(request.as_json)))
            submission.close()
            return None
        started = target.submit(submission, before_start)
        started.policy = None if target.traits.requeues else job.policy  # the script's own
        started.keep_s = keep_s(request, job) if target.traits.rents_hosts else None
        for line in record_served(started.job_id, job.loaded.spec, target.traits.on_this_machine):
            say(line)
        return started
    finally:
        target.close()


def prepare(request: LaunchRequest, *, requeues: bool = False) -> JobInput:
    """The spec and what follows from it alone, every refusal before any host is contacted
    for the job or rented. `requeues`: the target's scheduler carries out `recovery:`."""
    from launcher.agent import (
        AGENT_MODULES,
        AGENT_SOURCE,
        BUCKETS_SOURCE,
        CAPTURE_SOURCE,
        INIT_LOCK_SOURCE,
        LIFECYCLE_SOURCE,
        NOTIFY_SOURCE,
    )  # fmt: skip
    from launcher.jobs.notify import notify_hooks
    from launcher.plan.build import JOB_ID, Sources
    from launcher.spec.image import load_image_definition
    from launcher.spec.load import load_requested
    from launcher.spec.shell_hazards import script_hazards
    from launcher.state.owner import user_name
    from launcher.storage.bucket_mounts import resolve_buckets

    loaded = load_requested(vars(request))
    spec = loaded.spec
    _say_translation(loaded, request.dry_run)
    if spec.resources.candidates is not None and not request.up:
        from launcher.spec.candidates import unrented_line

        say(unrented_line(loaded.where("resources", "candidates"), spec.resources.candidates,
                          spec.resources.accelerators))  # fmt: skip
    if spec.resources.use_spot and not request.up:  # only a rental is ever interruptible
        where = "the --on hosts" if request.on else "this machine"
        say(f"warning: {loaded.where('resources', 'use_spot')}: resources.use_spot has no "
            f"effect without --up (nothing is rented); the job runs on {where}")  # fmt: skip
    hazards, doubts = script_hazards(loaded)  # the script's batch arithmetic and merge
    for line in doubts:
        say(f"warning: {line}")
    if hazards:
        raise ManyUsageErrors(hazards)
    policy = policy_for(request, loaded, requeues)  # refused before anything is rented
    if policy is not None and request.dry_run:
        events = ", ".join(policy.on)
        say(f"dry run: the scheduler requeues the job (up to {policy.max_restarts} restart(s)), "
            "each attempt resuming from its newest complete checkpoint" if requeues else
            f"dry run: once the job runs, a recovery controller would follow it (up to "
            f"{policy.max_restarts} restart(s) on {events})")  # fmt: skip
    if loaded.workdir is not None and not loaded.workdir.is_dir():
        raise UsageError(f"{loaded.where('workdir')}: workdir: {loaded.workdir} is not a folder")
    secret_values = _secret_values(loaded)
    hooks = notify_hooks(loaded)
    buckets = resolve_buckets(loaded)
    try:
        image = load_image_definition(spec.image, loaded.path.parent)
    except UsageError as err:
        raise UsageError(f"{loaded.where('image')}: image: {err.message}", err.hint) from None
    job_id = request.job_id or new_job_id(spec.name)
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
        agent_modules=(
            *AGENT_MODULES,
            *[NOTIFY_SOURCE] * bool(hooks),
            *[BUCKETS_SOURCE] * bool(buckets),
            *[LIFECYCLE_SOURCE] * bool(spec.hooks),
        ),
        job_modules=(str(CAPTURE_SOURCE),),
        user=user_name(),
        mounts_where={dst: loaded.where("file_mounts", dst) for dst in spec.file_mounts}
        | {f"hf:{dst}": loaded.where("hf_mounts", dst) for dst in spec.hf_mounts},
        notify=hooks,
        buckets=buckets,
    )
    return JobInput(loaded, image, job_id, secret_values, sources, policy)


def keep_s(request: LaunchRequest, job: JobInput) -> float | None:
    """The keep-on-failure window in force: the flag's over the spec's."""
    from launcher.spec.keep import keep_window

    return keep_window(request.keep_on_failure, job.loaded.spec.keep_on_failure)


def policy_for(request: LaunchRequest, loaded: LoadedSpec, requeues: bool = False) -> Policy | None:
    """The job's recovery (`recovery:`, or `--recover` with its defaults), refused before
    anything is rented where it cannot work; None without recovery. A scheduler that
    requeues (`requeues`) needs neither a rental nor S3: its shared filesystem keeps them."""
    from launcher.spec.recovery import RecoverySpec

    spec = loaded.spec
    recovery = spec.recovery or (RecoverySpec() if request.recover else None)
    if recovery is None:
        return None
    where = loaded.where("recovery") if spec.recovery else "--recover"
    if requeues:
        return Policy(max_restarts=recovery.max_restarts, on=tuple(recovery.on_events))
    if not spec.checkpoints.sync_to:
        raise UsageError(f"{where}: recovery needs checkpoints.sync_to: a job restarted on a "
                         "fresh host resumes from the checkpoints in S3",
                         "add checkpoints: {sync_to: REMOTE:prefix}")  # fmt: skip
    if not request.up:
        raise UsageError(f"{where}: recovery restarts the job on hosts gpujob rents, and "
                         "these are not rented",
                         "submit it with --up GPU, or leave recovery out")  # fmt: skip
    unreachable = os.environ.get("GPUJOB_RECOVER_UNREACHABLE_S")
    return Policy(
        max_restarts=recovery.max_restarts, on=tuple(recovery.on_events),
        unreachable_after_s=float(unreachable) if unreachable else recovery.unreachable_after,
        rent_tries=int(os.environ.get("GPUJOB_RECOVER_RENT_TRIES", "3")),
    )  # fmt: skip


def gpus_to_rent(up: str, loaded: LoadedSpec) -> str:
    """`--up GPU` picks the GPU; how many a host has is the job's, as the spec asks it
    (`resources.accelerators: L4:2` with `--up a100` rents a100:2, and says so): its ranks,
    batch arithmetic and SKYPILOT_NUM_GPUS_PER_NODE are planned for that count, which a
    SkyPilot user changing the GPU type expects to keep. A count in --up that differs is
    refused, naming both."""
    asked = loaded.spec.resources.gpus_per_node
    name, colon, count = up.partition(":")
    if not asked or (colon and not count.strip().isdigit()):
        return up  # a CPU job, or a request parse_gpu_request will refuse in its words
    where = loaded.where("resources", "accelerators")
    accelerators = loaded.spec.resources.accelerators
    if not colon:
        if asked > 1:
            say(f"--up {up}: {where}: resources.accelerators {accelerators} asks {asked} GPUs "
                f"per node; renting {name}:{asked}")  # fmt: skip
        return f"{name}:{asked}" if asked > 1 else up
    if int(count) != asked:
        raise UsageError(
            f"--up {up} rents {int(count)} GPU(s) per host but {where}: resources.accelerators "
            f"{accelerators} asks {asked}",
            f"write --up {name}:{asked}, or --set resources.accelerators={name.upper()}:{count}",
        )
    return up


def _max_price(request: LaunchRequest, loaded: LoadedSpec) -> float | None:
    """--max-price, else the spec's `resources.max_hourly_cost` (SkyPilot's cap)."""
    cap = loaded.spec.resources.max_hourly_cost
    if request.max_price is None and cap is not None:
        say(f"{loaded.where('resources', 'max_hourly_cost')}: resources.max_hourly_cost: "
            f"offers up to ${cap:.2f}/hour")  # fmt: skip
        return cap
    return request.max_price


def _say_translation(loaded: LoadedSpec, dry_run: bool) -> None:
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


def _secret_values(loaded: LoadedSpec) -> dict[str, str]:
    from launcher.spec.env_flags import flag_environ

    environ, values = flag_environ(), {}
    for index, name in enumerate(loaded.spec.secrets):
        if name not in environ:
            raise UsageError(
                f"{loaded.where('secrets', index)}: secrets: {name} is not set in your environment",
                f"export {name}=... before submitting (its value is never written to the spec,"
                " a command line or a log)",
            )
        values[name] = environ[name]
    return values
