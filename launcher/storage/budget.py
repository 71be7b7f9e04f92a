"""The disk budget at submit: will the checkpoints fit next to everything else?

checkpoint size x (keep_last + 1) (the one being written while keep_last are kept) + the
workdir + a job environment still to be created, each against the free space of its own
filesystem (an absolute `checkpoints.dir` on another disk is measured there, the job
environment where the environments are kept); /dev/shm against `resources.shm_gb` when the
spec sets it. The size is
the spec's (`checkpoints.size_gb`), an estimate from `checkpoints.params`, or unknown: then
the agent measures the first save and acts on it (ckpt_watch.py).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UsageError
from launcher.spec.load import LoadedSpec

GIB = 1 << 30
PARTS = frozenset({"checkpoints", "workdir", "environment"})


@dataclass(frozen=True)
class Budget:
    checkpoint: int | None
    kept: int
    workdir: int
    environment: int
    free: int
    where: str
    parts: frozenset[str] = PARTS
    """What this filesystem holds: all three, unless some live on another disk."""

    @property
    def needed(self) -> int:
        sizes = {"checkpoints": (self.checkpoint or 0) * self.kept, "workdir": self.workdir,
                 "environment": self.environment}  # fmt: skip
        return sum(size for part, size in sizes.items() if part in self.parts)

    def sum(self) -> str:
        ckpt = (
            "unknown size (measured after the first save)"
            if self.checkpoint is None
            else (f"{self.kept} x {_gib(self.checkpoint)}")
        )
        sizes = {"checkpoints": ckpt, "workdir": _gib(self.workdir),
                 "environment": _gib(self.environment)}  # fmt: skip
        terms = [f"{part} {size}" for part, size in sizes.items() if part in self.parts]
        return f"{' + '.join(terms)} = {_gib(self.needed)}"

    def line(self) -> str:
        return f"disk budget: {self.sum()}; {_gib(self.free)} free at {self.where}"


def _gib(size: int) -> str:
    return f"{size / GIB:.2f} GiB"


def existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def folder_bytes(path: Path) -> int:
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def disk_budget(
    loaded: LoadedSpec, job_root: str, environment_bytes: int = 0, env_dir: str | None = None
) -> list[Budget]:
    """This machine: each part against the filesystem it will be written to, one budget per
    filesystem (the job folder's first)."""
    folders = {
        "workdir": existing(Path(job_root)),
        "checkpoints": existing(Path(job_root) / loaded.spec.checkpoints.dir),
        "environment": existing(Path(env_dir)) if env_dir else existing(Path(job_root)),
    }
    disks: dict[int, set[str]] = {}
    for part, folder in folders.items():
        disks.setdefault(os.stat(folder).st_dev, set()).add(part)
    budgets = []
    for parts in disks.values():
        where = folders["workdir" if "workdir" in parts else min(parts)]
        budgets.append(check_budget(loaded, shutil.disk_usage(where).free, str(where),
                                    environment_bytes, frozenset(parts)))  # fmt: skip
    return budgets


def budget_of(
    loaded: LoadedSpec, environment_bytes: int, free: int = 0, where: str = "",
    parts: frozenset[str] = PARTS,
) -> Budget:  # fmt: skip
    """What the job will hold on disk: the kept checkpoints and the one being written, the
    workdir, the software still to be put there (of those, the `parts` on this disk)."""
    ckpt = loaded.spec.checkpoints
    kept = (ckpt.keep_last or 1) + 1
    workdir = folder_bytes(loaded.workdir) if loaded.workdir and "workdir" in parts else 0
    return Budget(ckpt.estimated_bytes, kept, workdir, environment_bytes, free, where, parts)


def check_budget(
    loaded: LoadedSpec, free: int, where: str, environment_bytes: int,
    parts: frozenset[str] = PARTS,
) -> Budget:  # fmt: skip
    """Refuse, with the numbers, a job whose kept checkpoints cannot fit in `free`."""
    ckpt = loaded.spec.checkpoints
    budget = budget_of(loaded, environment_bytes, free, where, parts)
    if budget.needed > budget.free:
        field = "size_gb" if ckpt.size_gb is not None else "params"
        raise UsageError(
            f"{loaded.where('checkpoints', field)}: {budget.line()}: "
            f"short by {_gib(budget.needed - budget.free)}",
            "lower checkpoints.keep_last, free space there, or use a host with a larger disk",
        )
    return budget


def shm_check(loaded: LoadedSpec, shm: str = "/dev/shm") -> None:
    spec = loaded.spec
    if "shm_gb" not in spec.resources.model_fields_set or not Path(shm).exists():
        return
    free = shutil.disk_usage(shm).free
    if free < spec.resources.shm_gb * GIB:
        raise UsageError(
            f"{loaded.where('resources', 'shm_gb')}: resources.shm_gb {spec.resources.shm_gb} "
            f"but {shm} has {_gib(free)} free on this host",
            f"lower shm_gb to at most {free // GIB}, or free {shm}",
        )
