"""Which checkpoints exist, which are complete, and which retention may delete. Stdlib only.

Shipped beside the agent (`gpujob-agent.py`) and imported by the launcher too, so the client
and the host agree on one rule. The marker contract:

- A checkpoint is a folder `<checkpoints dir>/<name>` whose name carries its step
  (`checkpoint-120`, `step_120`, `global_step120`); anything else (`.tmp-checkpoint-120`,
  `checkpoint-120-merged`) is not a checkpoint to gpujob.
- It is complete when `<ckpt>/.gpujob-complete` exists. The training program writes it after
  its save returned (write the folder under a temporary name, rename it, then the marker), or
  the agent writes it for a save it can prove finished (Hugging Face: `trainer_state.json`
  parses with the folder's step and no `checkpoint-is-incomplete.txt`; DCP: `.metadata`;
  verl: `latest_checkpointed_iteration.txt` beside the folders has reached its step), once
  the folder's files stopped changing between two looks. The spec's own rule,
  `checkpoints.complete_when: "step_{step}/DONE"`, replaces those three: with it, only a
  folder of its name pattern holding its file is adopted (a trainer that names its rule
  may leave a `trainer_state.json` in a save still being written).
- The marker is JSON: step, and every file's size, so a copy can be checked against it.
  In S3 the marker is uploaded last: an object prefix without it is not a checkpoint.

Retention orders by the step in the name, never by mtime (transformers 5 sorts by mtime and
an rclone copy back can make an old checkpoint look newest).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER = ".gpujob-complete"
RUN_MANIFEST = "gpujob-run.json"
"""Beside a run's checkpoints in S3 (`<sync_to>/<run>/`): whose they are (ckpt_logs)."""
NAME = re.compile(r"^(?:checkpoint|step|global_step)[-_]?(?P<step>\d+)$")
INCOMPLETE_HF = "checkpoint-is-incomplete.txt"
VERL_TRACKER = "latest_checkpointed_iteration.txt"
TEMPORARY = re.compile(r"^\.?(?:tmp-)")
CAPTURES = "captures"
"""gpujob_capture's steps (ckpt_captures.py): beside the checkpoints, never one of them."""


@dataclass(frozen=True)
class Checkpoint:
    name: str
    step: int
    path: Path
    complete: bool


def step_of(name: str) -> int | None:
    match = NAME.match(name)
    return int(match.group("step")) if match else None


def _folders(root: Path) -> list[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def scan(root: Path) -> list[Checkpoint]:
    """Checkpoints under `root`, oldest step first."""
    found = []
    for entry in _folders(root):
        step = step_of(entry.name)
        if step is None:
            continue
        path = Path(entry.path)
        found.append(Checkpoint(entry.name, step, path, (path / MARKER).is_file()))
    return sorted(found, key=lambda c: (c.step, c.name))


def complete(root: Path) -> list[Checkpoint]:
    return [c for c in scan(root) if c.complete]


def latest_complete(root: Path) -> Checkpoint | None:
    done = complete(root)
    return done[-1] if done else None


def files_of(path: Path) -> dict[str, int]:
    """Every file under a checkpoint (the marker excluded) and its size."""
    sizes = {}
    for folder, _, names in os.walk(path):
        for name in names:
            full = Path(folder) / name
            rel = full.relative_to(path).as_posix()
            if rel != MARKER:
                sizes[rel] = full.stat().st_size
    return dict(sorted(sizes.items()))


def write_marker(path: Path, step: int, written_by: str) -> None:
    """Atomic, like every file gpujob writes: a reader sees no marker or a whole one."""
    body = {"step": step, "files": files_of(path), "written_by": written_by}
    tmp = path / f".{MARKER}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path / MARKER)


def read_marker(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return {}


def finished_by_rule(path: Path, rule: str) -> bool:
    """The spec's `complete_when` (`step_{step}/DONE`): the folder's name fits its folder
    part, and its file part exists there, `{step}` written as in the folder's name."""
    folder, _, done_file = rule.partition("/")
    head, _, tail = folder.partition("{step}")
    name = path.name
    digits = name[len(head) : len(name) - len(tail)]
    if not (name.startswith(head) and name.endswith(tail) and digits.isdigit()):
        return False
    return (path / done_file.replace("{step}", digits)).is_file()


def finished_by_format(path: Path, step: int, rule: str | None = None) -> bool:
    """A save the agent can prove finished without the program's marker (runtime.md 6.4);
    with the spec's `complete_when` rule, that rule alone."""
    if rule is not None:
        return finished_by_rule(path, rule)
    if (path / INCOMPLETE_HF).exists():
        return False
    if _verl_step(path.parent) >= step:  # verl writes its tracker once the save returned
        return True
    state = path / "trainer_state.json"
    if state.is_file():
        try:
            return json.loads(state.read_text()).get("global_step") == step
        except (OSError, ValueError):
            return False
    return (path / ".metadata").is_file()


def _verl_step(root: Path) -> int:
    try:
        return int((root / VERL_TRACKER).read_text().strip())
    except (OSError, ValueError):
        return -1


def unrecognised(root: Path) -> list[str]:
    """Folders under `root` that no rule names as a checkpoint (nor as a save's temporary
    name): gpujob neither syncs nor prunes them, which the user must hear about."""
    return sorted(
        e.name
        for e in _folders(root)
        if step_of(e.name) is None and not TEMPORARY.match(e.name) and e.name != CAPTURES
    )


def stuck_incomplete(checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """Step-named folders left without completion while a later save exists: by no rule
    complete, so never synced, pruned or given to a hook (a `DONE` file gpujob was not told
    about, a save that died)."""
    if not checkpoints:
        return []
    newest = checkpoints[-1].step
    return [c for c in checkpoints if not c.complete and c.step < newest]


@dataclass
class Adopter:
    """Writes the marker for format-complete checkpoints whose files held still for one look.

    Two looks are needed because `trainer_state.json` is written with a plain open(): it
    can parse while the rest of the save is still being flushed by another rank."""

    seen: dict[str, dict[str, int]] = field(default_factory=dict)
    rule: str | None = None
    """The spec's `checkpoints.complete_when`, when it gives one."""

    def adopt(self, root: Path) -> list[Checkpoint]:
        adopted = []
        for ckpt in scan(root):
            if ckpt.complete or not finished_by_format(ckpt.path, ckpt.step, self.rule):
                self.seen.pop(ckpt.name, None)
                continue
            now = files_of(ckpt.path)
            if self.seen.get(ckpt.name) == now:
                write_marker(ckpt.path, ckpt.step, "agent")
                adopted.append(ckpt)
                self.seen.pop(ckpt.name, None)
            else:
                self.seen[ckpt.name] = now
        return adopted


def to_delete(
    checkpoints: list[Checkpoint], keep_last: int | None, safe: set[str], protected: set[str]
) -> list[Checkpoint]:
    """Complete checkpoints beyond the newest `keep_last`, oldest first, that are `safe`
    (synced, or no sync target) and not `protected` (a hook still needs them). The newest
    complete one is never returned, whatever `keep_last` says; incomplete ones never are."""
    if keep_last is None:
        return []
    done = [c for c in checkpoints if c.complete]
    older = done[: -max(keep_last, 1)]
    return [c for c in older if c.name in safe and c.name not in protected]


def disk_usage(path: Path) -> tuple[int, int, float]:
    """(total, free, used %) as df counts them: free is what an unprivileged writer gets."""
    stat = os.statvfs(path)
    total = stat.f_blocks * stat.f_frsize
    free = stat.f_bavail * stat.f_frsize
    used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
    percent = 100.0 * used / (used + free) if used + free else 0.0
    return total, free, percent


def in_progress_bytes(root: Path) -> int:
    """Bytes of saves under way: checkpoint-named folders without a marker, and their
    temporary names (`.tmp-checkpoint-N`, `tmp-checkpoint-N`). Counted as free when deciding
    whether the next save fits, so a sample taken mid-save does not stop a save that fits."""
    total = 0
    for entry in _folders(root):
        name = entry.name.lstrip(".")
        name = name[4:] if name.startswith("tmp-") else name
        path = Path(entry.path)
        if step_of(name) is not None and not (path / MARKER).is_file():
            total += tree_bytes(path)
    return total


def tree_bytes(path: Path) -> int:
    return sum(files_of(path).values()) if path.exists() else 0


def remove(path: Path) -> None:
    """Marker first: a crash half-way through leaves an incomplete folder, never a
    'complete' checkpoint with files missing."""
    (path / MARKER).unlink(missing_ok=True)
    for folder, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.unlink(os.path.join(folder, name))
        for name in dirs:
            os.rmdir(os.path.join(folder, name))
    os.rmdir(path)
