"""`gpujob submit JOB.yaml --ladder 1,2,4 [--ladder-steps N]`: the job run at each rung of a
scale-up ladder, in order, on the same target, each rung its own job (`<id>-r<world>`) bounded
to N steps (GPUJOB_MAX_STEPS), or without N to its first complete checkpoint (ladder_stop.py),
until the first rung that fails; after each rung one row of
what it measured, and for the failing rung its cause and what the rung before it measured.

Every rung is planned first (plan/ladder.py: layouts and batch arithmetic, every refusal at
once) and goes through the one launch path (`jobs.launch`) as a submit of it would. A rung's
job is never left running: a Ctrl-C, a broken follow or an error cancels it before the
command ends.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from launcher.errors import GpujobError, ManyUsageErrors, UsageError
from launcher.jobs.ladder_cause import Cause, classify, per_rank, throughput
from launcher.jobs.step_clock import StepClock
from launcher.plan.ladder import Ladder, Rung, plan_ladder
from launcher.say import say
from launcher.targets.base import LaunchRequest

if TYPE_CHECKING:
    from launcher.targets.cloud.rent import Rent

CANCEL_GRACE_S = 10.0
OOM_PROBE = ("grep -H oom_kill /sys/fs/cgroup/memory.events 2>/dev/null; "
             "dmesg 2>/dev/null | grep -iE 'out of memory|oom-kill' | tail -n 3; true")  # fmt: skip
"""What the host's kernel says of the OOM killer, where readable (root, a cgroup v2 host)."""
STOPPED = "the follow was stopped (Ctrl-C, a signal): the rung is cancelled, the ladder ends"
COLUMNS = ("world", "exit", "host mem/rank", "GPU mem/rank", "first step", "throughput")


@dataclasses.dataclass
class Measured:
    """One rung's row: what it measured, and for a failed rung why (`cause`)."""

    rung: Rung
    exit_code: int
    host_memory: str = "-"
    gpu_memory: str = "-"
    first_step: str = "-"
    throughput: str = "-"
    cause: Cause | None = None

    def cells(self) -> tuple[str, ...]:
        return (str(self.rung.world), str(self.exit_code), self.host_memory, self.gpu_memory,
                self.first_step, self.throughput)  # fmt: skip


def ladder(request: LaunchRequest, rungs: str | None, steps: int | None) -> int:
    from launcher.jobs.launch import new_job_id
    from launcher.spec.load import load_requested

    if rungs is None:
        raise UsageError(f"--ladder-steps {steps} goes with --ladder (the rungs to run)",
                         "add --ladder 1,2,4, or leave --ladder-steps out")  # fmt: skip
    _refuse_with(request)
    if request.up:  # `--up` alone: the spec's candidates quoted, one taken
        from launcher.targets.cloud.candidates import rental_of

        request = rental_of(request)
    loaded = load_requested(vars(request))
    plan = plan_ladder(loaded.spec, rungs, steps, loaded.where("batch", "global_batch"))
    ladder_id = request.job_id or new_job_id(loaded.spec.name)
    _load_every_rung(request, plan, ladder_id)
    if request.dry_run:
        return _dry_run(request, plan, ladder_id)
    say(plan.text(ladder_id).rstrip("\n"))
    if not request.up:
        return _climb(request, plan, ladder_id, _on_hosts(request, plan))
    from launcher.targets.cloud.rent import renting

    with renting("ladder --up") as rent:  # every way out terminates what it rented
        hosts = _rent_for_the_top(request, plan, ladder_id, rent)
        code = _climb(dataclasses.replace(request, up=None), plan, ladder_id, hosts)
        rent.undo(interrupted=False, why="finished")
        return code


def _climb(request: LaunchRequest, plan: Ladder, ladder_id: str, hosts: tuple[str, ...]) -> int:
    """The rungs in order, on `hosts` (rented for the top rung) or the request's target."""
    done: list[Measured] = []
    probes: dict[str, str] = {}  # each host's OOM record after the rung before
    for rung in plan.rungs:
        rung_request = _rung_request(request, rung, plan, ladder_id)
        if hosts:
            rung_request = dataclasses.replace(rung_request, on=hosts[: rung.nodes])
        measured = _run_rung(rung_request, rung, probes, plan.until_checkpoint)
        done.append(measured)
        _row(measured, header=len(done) == 1)
        if measured.exit_code != 0:
            _explain(measured, done[-2] if len(done) > 1 else None)
            break
    sys.stdout.write(table(done))
    if done[-1].exit_code == 0:
        say(f"ladder {ladder_id}: every rung passed")
    return done[-1].exit_code


def _on_hosts(request: LaunchRequest, plan: Ladder) -> tuple[str, ...]:
    """`--on A,B`: each rung takes the first hosts it needs (node 0 first); one host (all
    nodes on it) or a SLURM cluster is given to every rung as it is."""
    from launcher.targets.slurm.on import is_slurm_target

    hosts = tuple(host for item in request.on for host in item.split(",") if host.strip())
    if len(hosts) < 2 or is_slurm_target(hosts):
        return ()
    top = plan.rungs[-1]
    if len(hosts) < top.nodes:
        raise UsageError(f"--on names {len(hosts)} hosts but the ladder's top rung (world "
                         f"{top.world}) needs {top.nodes} nodes",
                         "name one host per node of the top rung, node 0 first")  # fmt: skip
    return hosts


def _rent_for_the_top(
    request: LaunchRequest, plan: Ladder, ladder_id: str, rent: Rent
) -> tuple[str, ...]:
    """`--up`: the top rung's hosts, rented once through submit --up's own placement (its
    checks before renting, its offers, its all-or-nothing launch); every rung runs on them
    as on `--on` hosts, and the rent ends with the ladder."""
    from launcher.jobs.launch import gpus_to_rent, prepare
    from launcher.remote.hosts import HostEntry
    from launcher.targets.base import close_all, target_for_request
    from launcher.targets.hosts import HostsTarget

    top = _rung_request(request, plan.rungs[-1], plan, ladder_id)
    job = prepare(top)
    top = dataclasses.replace(top, up=gpus_to_rent(top.up or "", job.loaded))
    target = target_for_request(top, rent)
    assert isinstance(target, HostsTarget)  # a cloud's: placed as submit --up places
    placement, _ = target.place(job, top)
    close_all(list(placement.connections.values()))
    names = tuple(HostEntry.from_record(record).name for record in placement.records)
    say(f"ladder {ladder_id}: rented {', '.join(names)} for the top rung; every rung runs there")
    return names


def _load_every_rung(request: LaunchRequest, plan: Ladder, ladder_id: str) -> None:
    """Each rung's spec as its launch will load it: what any rung refuses is said, for every
    rung at once, before the first one starts."""
    from launcher.spec.load import load_requested

    refusals = []
    for rung in plan.rungs:
        try:
            load_requested(vars(_rung_request(request, rung, plan, ladder_id)))
        except UsageError as err:
            refusals += [f"rung {rung.job_id(ladder_id)}: {line}" for line in err.lines()]
    if refusals:
        raise ManyUsageErrors(refusals)


def _refuse_with(request: LaunchRequest) -> None:
    refused = {"--detach": request.detach, "--recover": request.recover,
               "--resume-from": request.resume_path, "--json": request.as_json}  # fmt: skip
    if not request.up and (request.max_cost is not None or request.autostop_key_on_host):
        raise UsageError("--max-cost and --autostop-key-on-host go with --up (a rental)",
                         "add --up GPU, or leave them out")  # fmt: skip
    for flag, given in refused.items():
        if given:
            raise UsageError(f"--ladder with {flag}: a ladder follows each rung to its end, "
                             "from a fresh start", f"leave {flag} out")  # fmt: skip


def _rung_request(
    request: LaunchRequest, rung: Rung, plan: Ladder, ladder_id: str
) -> LaunchRequest:
    return dataclasses.replace(request, sets=(*request.sets, *rung.sets),
                               job_id=rung.job_id(ladder_id), max_steps=plan.steps)  # fmt: skip


def _dry_run(request: LaunchRequest, plan: Ladder, ladder_id: str) -> int:
    """The ladder, then each rung's own dry run: the objects that would run."""
    from launcher.jobs.launch import launch
    from launcher.targets.base import target_for_request

    sys.stdout.write(plan.text(ladder_id))
    if request.up:
        top = plan.rungs[-1]
        sys.stdout.write(f"--up {request.up}: rents once, {top.nodes} host(s) for the top rung; "
                         "every rung runs on them, terminated when the ladder ends\n")  # fmt: skip
    for rung in plan.rungs:
        sys.stdout.write(f"\n# rung {rung.job_id(ladder_id)}\n")
        sys.stdout.flush()
        rung_request = _rung_request(request, rung, plan, ladder_id)
        launch(rung_request, target_for_request(rung_request))
    return 0


def _run_rung(
    request: LaunchRequest, rung: Rung, probes: dict[str, str], until_checkpoint: bool
) -> Measured:
    """One rung through the launch path, followed to its end (or, `until_checkpoint`, to its
    first complete checkpoint, where it is stopped as a pass); never left running."""
    from launcher.jobs.follow import show_log
    from launcher.jobs.ladder_stop import CheckpointStop
    from launcher.jobs.launch import launch
    from launcher.state.db import StateDB
    from launcher.targets.base import target_for_request

    assert request.job_id is not None
    say(f"rung {request.job_id}: world size {rung.world}")
    begun = time.monotonic()
    clock = StepClock(begun)
    started = None
    try:
        started = launch(request, target_for_request(request))
        assert started is not None
        job = StateDB().job(started.job_id)
        assert job is not None
        stop = CheckpointStop(job.id, CANCEL_GRACE_S)
        with clock.watching(), stop.watching() if until_checkpoint else nullcontext():
            code = show_log(job, follow=True, opened=started.opened,
                            first_reads=started.first_reads)  # fmt: skip
        code = 0 if stop.reached is not None else code
        return _measure(request.job_id, rung, code, clock, started.opened, probes)
    except GpujobError as err:  # the rung never ran to an end: said as its cause
        return Measured(rung, int(err.exit_code), cause=Cause(err.one_line(), None, ()))
    finally:
        _never_left_running(request.job_id)
        if started is not None:
            started.close()


def _never_left_running(job_id: str) -> None:
    """A rung whose follow stopped (Ctrl-C, SIGTERM, an error) with its job still running is
    cancelled: the ladder leaves nothing behind."""
    from launcher.jobs.cancel import cancel_job
    from launcher.jobs.state import is_terminal
    from launcher.state.db import StateDB

    job = StateDB().job(job_id)
    if job is not None and not is_terminal(job.state):
        say(f"rung {job_id} still runs: cancelling it")
        cancel_job(job, CANCEL_GRACE_S)


def _measure(
    job_id: str, rung: Rung, code: int, clock: StepClock, opened: Any, probes: dict[str, str]
) -> Measured:
    """The rung's row from its agents' statuses (peak memory per rank) and its log; each
    host's OOM record is read after every rung, so a failing rung's is told from older ones."""
    from launcher.jobs.state import is_terminal
    from launcher.state.db import StateDB
    from launcher.targets.base import target_for

    job = StateDB().job(job_id)
    assert job is not None
    if not is_terminal(job.state):  # the follow stopped, not the job: cancelled, and no rung more
        return Measured(rung, code or 1, cause=Cause(STOPPED, None, ()))
    host: dict[str, int] = {}
    gpu: dict[str, int] = {}
    failed: list[tuple[str, str, int]] = []
    logs, before, probed = [], dict(probes), set()
    for node in target_for(job).nodes(job, opened):
        data, status = node.connection.read_log(node.node_dir, 0)
        host.update(status.get("peak_rss_by_rank") or {})
        gpu.update(status.get("peak_gpu_by_rank") or {})
        if not status.get("peak_rss_by_rank") and status.get("peak_rss_bytes"):
            host[str(node.rank)] = int(status["peak_rss_bytes"])  # no RANK: the node's tree
        name = node.connection.host
        if name not in probed:  # once per host and rung
            probes[name] = node.connection.run(["sh", "-c", OOM_PROBE]).stdout
            probed.add(name)
        logs.append(data.decode(errors="replace"))
        if status.get("exit_code") not in (0, None):
            failed.append((logs[-1], name, int(status["exit_code"])))
    measured = Measured(rung, code, per_rank(host), per_rank(gpu), clock.first_step(),
                        throughput("\n".join(logs)))  # fmt: skip
    if code != 0:
        causes = [classify(text, exit_code, probes[name], before.get(name, ""))
                  for text, name, exit_code in failed or [(logs[0], name, code)]]  # fmt: skip
        measured.cause = min(causes, key=lambda c: c.what.startswith(("traceback", "exit code")))
    return measured


def _row(measured: Measured, header: bool) -> None:
    if header:
        say(" | ".join(COLUMNS))
    say(" | ".join(measured.cells()))


def _explain(measured: Measured, before: Measured | None) -> None:
    cause = measured.cause
    assert cause is not None
    say(
        f"world {measured.rung.world} failed: {cause.line()}"
        + ("; its last lines:" if cause.lines else "")
    )
    for line in cause.lines:
        sys.stderr.write(f"  {line}\n")
    if before is not None:
        say(f"the rung before (world {before.rung.world}) measured: host memory per rank "
            f"{before.host_memory}, GPU memory per rank {before.gpu_memory}, first step after "
            f"{before.first_step}, throughput {before.throughput}")  # fmt: skip


def table(done: list[Measured]) -> str:
    """The ladder's table (stdout: the command's answer), the failing rung's cause last."""
    rows = [COLUMNS, *(m.cells() for m in done)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]  # fmt: skip
    failed = done[-1].cause
    if failed is not None:
        lines.append(f"world {done[-1].rung.world}: {failed.line()}")
    return "\n".join(lines) + "\n"
