"""The disk budget at submit: will the checkpoints fit next to everything else?

checkpoint size x (keep_last + 1) (the one being written while keep_last are kept) + the
workdir + a job environment still to be created, against the free space where the job
directory will be; /dev/shm against `resources.shm_gb` when the spec sets it. The size is
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


@dataclass(frozen=True)
class Budget:
    checkpoint: int | None
    kept: int
    workdir: int
    environment: int
    free: int
    where: str

    @property
    def needed(self) -> int:
        return (self.checkpoint or 0) * self.kept + self.workdir + self.environment

    def sum(self) -> str:
        ckpt = (
            "unknown size (measured after the first save)"
            if self.checkpoint is None
            else (f"{self.kept} x {_gib(self.checkpoint)}")
        )
        return (
            f"checkpoints {ckpt} + workdir {_gib(self.workdir)} + environment "
            f"{_gib(self.environment)} = {_gib(self.needed)}"
        )

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


def disk_budget(loaded: LoadedSpec, job_root: str, environment_bytes: int = 0) -> Budget:
    where = existing(Path(job_root))
    return check_budget(loaded, shutil.disk_usage(where).free, str(where), environment_bytes)


def budget_of(loaded: LoadedSpec, environment_bytes: int, free: int = 0, where: str = "") -> Budget:
    """What the job will hold on disk: the kept checkpoints and the one being written, the
    workdir, the software still to be put there."""
    ckpt = loaded.spec.checkpoints
    kept = (ckpt.keep_last or 1) + 1
    workdir = folder_bytes(loaded.workdir) if loaded.workdir else 0  # None: nothing shipped
    return Budget(ckpt.estimated_bytes, kept, workdir, environment_bytes, free, where)


def check_budget(loaded: LoadedSpec, free: int, where: str, environment_bytes: int) -> Budget:
    """Refuse, with the numbers, a job whose kept checkpoints cannot fit in `free`."""
    ckpt = loaded.spec.checkpoints
    budget = budget_of(loaded, environment_bytes, free, where)
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
