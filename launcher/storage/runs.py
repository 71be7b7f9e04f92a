"""Runs own their checkpoints: every job's checkpoints and shipped logs live in a folder of
their own under `checkpoints.sync_to` (`PREFIX/RUN/checkpoint-N`, `PREFIX/RUN/logs/JOB`),
RUN being the job id or the spec's `checkpoints.run`, with the agent's manifest
(`gpujob-run.json`) beside them. Retention and recovery look only there.

Before this, checkpoints sat directly under the prefix (the flat layout): two runs on one
prefix mixed them (one's retention deleted the other's, its recovery pulled the other's
newest). A prefix holding such checkpoints, or other runs, is read as it is and named at
submit; `--resume-from` starts from one of them on purpose.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from launcher.agent.ckpt_store import MARKER, RUN_MANIFEST, step_of
from launcher.plan.node_files import run_name, run_prefix, run_record, spec_hash

if TYPE_CHECKING:
    from launcher.spec.job import JobSpec
    from launcher.storage.remotes import RemotePath

__all__ = ["Survey", "read_manifest", "run_name", "run_prefix", "run_record", "spec_hash",
           "survey"]  # fmt: skip


@dataclass
class Survey:
    """What a prefix holds, from one listing: checkpoints directly under it (the flat layout
    of earlier gpujob versions) and the runs in folders of their own."""

    flat: list[str] = field(default_factory=list)
    runs: dict[str, list[str]] = field(default_factory=dict)
    """run -> its complete checkpoints, oldest step first (a run: a folder with a manifest
    or with checkpoints of its own)."""
    manifests: set[str] = field(default_factory=set)

    @staticmethod
    def of(keys: list[tuple[str, int]]) -> Survey:
        survey = Survey()
        for key, _ in keys:
            parts = key.split("/")
            if len(parts) == 2 and parts[1] == MARKER and step_of(parts[0]) is not None:
                survey.flat.append(parts[0])
            elif len(parts) == 3 and parts[2] == MARKER and step_of(parts[1]) is not None:
                survey.runs.setdefault(parts[0], []).append(parts[1])
            elif len(parts) == 2 and parts[1] == RUN_MANIFEST:
                survey.runs.setdefault(parts[0], [])
                survey.manifests.add(parts[0])
        survey.flat.sort(key=lambda n: step_of(n) or 0)
        for names in survey.runs.values():
            names.sort(key=lambda n: step_of(n) or 0)
        return survey


def survey(path: RemotePath) -> Survey:
    from launcher.storage.s3 import list_keys

    return Survey.of(list_keys(path))


def read_manifest(path: RemotePath, run: str) -> dict[str, object]:
    """The run's manifest, or {} when it has none (yet) or it does not parse."""
    from launcher.storage.s3 import read_object

    try:
        data = json.loads(read_object(path, f"{run}/{RUN_MANIFEST}") or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def check_run(
    spec: JobSpec, target: RemotePath, job_id: str, report: Callable[[str], None]
) -> None:
    """At submit, before anything starts: the job's run folder is its own (empty, its own
    job's, or the same spec's run it names on purpose), else refused; what else the prefix
    holds (the flat layout, other runs) is said in one line, with how to start from it."""
    from launcher.errors import UsageError
    from launcher.storage.s3 import RemoteUnreachable

    run = run_name(spec, job_id)
    try:
        found = survey(target)
    except RemoteUnreachable as err:
        report(f"note: could not list {target} from here ({err.message}); runs not checked")
        return
    mine = found.runs.get(run)
    if mine is not None:
        manifest = read_manifest(target, run)
        owner, made_by = manifest.get("job_id"), manifest.get("spec_hash")
        named = spec.checkpoints.run is not None
        if (not named and owner not in (None, job_id)) or (
            named and made_by not in (None, spec_hash(spec))
        ):
            newest = f"/{mine[-1]}" if mine else ""
            raise UsageError(
                f"checkpoints.sync_to {target}: {target}/{run} holds run {run} of job {owner} "
                f"({'from another spec' if named else 'another job'}); this job would mix its "
                "checkpoints with them, so it was not started",
                f"give it another checkpoints.run (or leave run out: the job id), or start "
                f"from its checkpoint with --resume-from {target}/{run}{newest}",
            )
        if mine and owner != job_id:
            report(f"continuing run {run} in {target} (job {owner}, newest {mine[-1]}): its "
                   "checkpoints stay, a recovery resumes from its newest")  # fmt: skip
    own = f"this job keeps its own in {target}/{run}"
    if found.flat:
        newest = found.flat[-1]
        report(f"note: {target} holds checkpoints in the flat layout of an earlier gpujob "
               f"(newest {newest}); {own} and does not resume from them (to: submit with "
               f"--resume-from {target}/{newest})")  # fmt: skip
    others = sorted(r for r in found.runs if r != run)
    if others:
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        report(f"note: {target} also holds run(s) {', '.join(others[:5])}{more}; {own}: to "
               f"start from one, --resume-from {target}/RUN[/checkpoint-N]")  # fmt: skip
