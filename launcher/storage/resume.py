"""`submit --resume-from REMOTE:prefix/run[/checkpoint-N]`: start a job from a checkpoint of
another run on purpose (or of a prefix in the flat layout of earlier versions), found and
checked here before anything is contacted or rented; the launch pulls it onto node 0's host,
verified against its marker as a recovery's pull is, and the job gets GPUJOB_RESUME_FROM."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from launcher.agent.ckpt_store import MARKER, step_of
from launcher.errors import UsageError

FLAG = "--resume-from"


@dataclass(frozen=True)
class Found:
    """The checkpoint to start from: its folder name, step, and the `REMOTE:prefix` above it."""

    name: str
    step: int
    remote: str


def find_resume(text: str, request: Mapping[str, Any]) -> Found:
    """The checkpoint `text` names (its run's newest when it names a run), complete in S3
    (its marker there), or a one-line refusal that says what the path holds instead."""
    from launcher.spec.load import load_requested
    from launcher.storage.remotes import all_remotes, parse_remote_path
    from launcher.storage.runs import survey

    spec = load_requested(request).spec
    path = parse_remote_path(text, all_remotes(spec.storage), FLAG)
    parent, _, leaf = path.key_prefix.rpartition("/")
    if step_of(leaf) is not None:  # a checkpoint named: it alone, in the folder above it
        above = replace(path, prefix=parent)
        complete = survey(above).flat
        where = f"{path.remote.name}:{parent}"
        if leaf not in complete:
            have = ", ".join(complete) or "none"
            raise UsageError(f"{FLAG} {text}: no complete checkpoint {leaf} in {where} "
                             f"(complete there: {have})",
                             f"a checkpoint counts once its {MARKER} marker is in S3")  # fmt: skip
        return Found(leaf, step_of(leaf) or 0, where)
    found = survey(path)
    if found.flat:  # a run's folder (or a flat prefix): its newest
        newest = found.flat[-1]
        return Found(newest, step_of(newest) or 0, str(path))
    runs = sorted(found.runs)
    hint = f"name one: {FLAG} {path}/{runs[0]}" if runs else "check the path: `gpujob storage tree`"
    raise UsageError(
        f"{FLAG} {text}: no complete checkpoint there"
        + (f"; it holds the run(s) {', '.join(runs[:5])}" if runs else ""),
        hint,
    )
