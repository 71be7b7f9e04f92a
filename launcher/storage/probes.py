"""The checks `submit` makes before any file reaches a host, as steps of the Submission: the
dry run prints them (one line each: what runs where, secrets' names only) and `submit` runs
these same objects, in this order. On a remote host: the free disk where the job folders go
(and on the checkpoints' own disk when `checkpoints.dir` is absolute) against the disk
budget, then the S3 write probe from the host (its keys on the program's stdin). On this
machine: the S3 write probe from here (boto3); the disk budget is read with the plan
(preflight.py), so a dry run makes it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from launcher.spec.load import LoadedSpec
from launcher.storage import on_host, rclone_config
from launcher.storage.preflight import ENVIRONMENT_GUESS, probe_sync_target, sync_target
from launcher.storage.remotes import credentials

HERE = "this machine"
SCRIPTS = {on_host.FREE: "<free-disk read>", on_host.PROBE: "<S3 write probe>"}
"""The short names the dry run's text gives the programs run with `python3 -c`."""


@dataclass(frozen=True)
class Probe:
    """One check before start. `argv` is what runs on `host` (empty: from this machine,
    through boto3); `stdin` names the variables it reads there, never their values."""

    check: str
    """`free disk`, `free disk (checkpoints)`, `S3 write probe` or `run folder`."""
    host: str
    argv: tuple[str, ...]
    why: str
    stdin: tuple[str, ...] = field(default=())
    from_facts: bool = False
    """The free disk comes with the host's facts (read at contact) where they have it:
    `argv` runs only where they do not."""


def probes_for(
    loaded: LoadedSpec, plan: Any, environment: str | None, *, on_this_machine: bool
) -> tuple[Probe, ...]:
    """The checks for this plan, decided without I/O (a dry run prints them)."""
    target = sync_target(loaded)
    if on_this_machine:
        if target is None:
            return ()
        return (Probe("S3 write probe", HERE, (), f"list {target}'s bucket, write and delete "
                      "a probe object there, from here (boto3)"), _run_folder(target))  # fmt: skip
    node = plan.nodes[0]  # node 0's host stands for the others: the same image and paths
    job_root = str(PurePosixPath(node.job_dir).parent)
    probes = [Probe("free disk", node.host, ("python3", "-c", on_host.FREE, job_root,
                                             environment or ""),
                    "free disk where the job folders go, against the disk budget",
                    from_facts=environment is None)]  # fmt: skip
    ckpt = loaded.spec.checkpoints.dir
    if Path(ckpt).is_absolute():
        probes.append(Probe("free disk (checkpoints)", node.host,
                            ("python3", "-c", on_host.FREE, ckpt, ""),
                            "free disk where the checkpoints go, if another disk"))  # fmt: skip
    if target is not None:
        env = rclone_config.env_vars(target.remote, credentials(target.remote), for_hosts=True)
        bucket = rclone_config.rclone_path(target.remote, "")
        prefix = rclone_config.rclone_path(target.remote, target.prefix)
        probes.append(Probe("S3 write probe", node.host,
                            ("python3", "-c", on_host.PROBE, bucket, prefix),
                            f"list {target}'s bucket, write and delete a probe object, "
                            "from the host", tuple(sorted(env))))  # fmt: skip
        probes.append(_run_folder(target))
    return tuple(probes)


def _run_folder(target: Any) -> Probe:
    return Probe("run folder", HERE, (), f"the job's run folder under {target} is its own "
                 "(a listing from here, storage/runs.py); what else is there is said")  # fmt: skip


def probe_lines(probes: tuple[Probe, ...]) -> list[str]:
    """The dry run's text: one line each, its `python3 -c` program by a short name."""
    from launcher.plan.show import MASK, shell_word

    if not probes:
        return []
    lines = ["", "checked first, before any file reaches a host:"]
    for probe in probes:
        words = " ".join(SCRIPTS.get(w) or shell_word(w) for w in probe.argv) or "(boto3)"
        given = "".join(f" {name}={MASK}" for name in probe.stdin)
        stdin = f"; on its stdin:{given}" if given else ""
        facts = " (from the host's facts where they have it)" if probe.from_facts else ""
        lines.append(f"  {probe.check} on {probe.host}: {words}  # {probe.why}{facts}{stdin}")
    return lines


def run_probes(
    probes: tuple[Probe, ...],
    loaded: LoadedSpec,
    environment: str | None,
    connections: dict[str, Any],
    report: Callable[[str], None],
    facts: dict[str, Any] | None = None,
    job_id: str = "",
) -> None:
    """Carry out the probes in order (the disks first, as `probes_for` lists them); the
    first that fails refuses the start in one line."""
    from launcher.runtime.trace import traced

    read: list[tuple[Probe, int, str, int]] = []
    for probe in probes:
        traced(probe.host, None, probe)
        if probe.check == "run folder":
            from launcher.storage.runs import check_run

            target = sync_target(loaded)
            assert target is not None
            check_run(loaded.spec, target, job_id, report)
        elif probe.host == HERE:
            target = probe_sync_target(loaded, "the job was not started", report)
            bundle = rclone_config.ca_bundle(target.remote) if target else None
            if bundle:
                report(f"rclone gets the CA bundle {bundle} as RCLONE_CA_CERT "
                       "(AWS_CA_BUNDLE unset for it)")  # fmt: skip
        elif probe.check.startswith("free disk"):
            known = (facts or {}).get(probe.host)
            if probe.from_facts and known is not None and known.free_bytes is not None:
                read.append((probe, known.free_bytes, known.free_at, 0))
                continue
            conn = connections[probe.host]
            free, ready, where = on_host.free_space(conn, probe.argv[3], probe.argv[4])
            read.append((probe, free, where, ENVIRONMENT_GUESS if environment and not ready else 0))
        else:
            if read:  # every disk read: the budget before the S3 probe
                _check_budgets(loaded, read, report)
                read = []
            _write_probe(loaded, probe, connections[probe.host], report)
    if read:
        _check_budgets(loaded, read, report)


def _check_budgets(
    loaded: LoadedSpec, read: list[tuple[Probe, int, str, int]], report: Callable[[str], None]
) -> None:
    """The job folders' disk holds every part, or, where the checkpoints have a disk of
    their own (other free bytes: one disk reads the same twice), each its own."""
    from launcher.storage.budget import PARTS, check_budget

    (probe, free, where, to_create), *ckpt = read
    budgets = [(free, where, PARTS)]
    if ckpt and ckpt[0][1] != free:
        budgets = [(free, where, PARTS - {"checkpoints"}),
                   (ckpt[0][1], ckpt[0][2], frozenset({"checkpoints"}))]  # fmt: skip
    for free, where, parts in budgets:
        budget = check_budget(loaded, free, f"{probe.host}:{where}", to_create, parts)
        if loaded.spec.checkpoints.estimated_bytes is not None:
            report(budget.line())


def _write_probe(
    loaded: LoadedSpec, probe: Probe, conn: Any, report: Callable[[str], None]
) -> None:
    from launcher.storage.s3 import RemoteUnreachable

    target = sync_target(loaded)
    assert target is not None
    env = rclone_config.env_vars(target.remote, credentials(target.remote), for_hosts=True)
    failed = on_host.probe(conn, env, probe.argv[3], probe.argv[4])
    if failed:
        raise RemoteUnreachable(
            f"checkpoints.sync_to {target}: from {probe.host}, remote {target.remote.name} "
            f"({target.remote.model.host_endpoint or target.remote.model.endpoint}, bucket "
            f"{target.remote.model.bucket}): {failed}; the job was not started",
            f"check the remote in {target.remote.where} (`host_endpoint` if the host reaches "
            "S3 at another address)",
        )
    report(f"sync target {target}: reachable from {probe.host}, write probe ok")
