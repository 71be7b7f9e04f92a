"""Steps the job saved with gpujob_capture (`<checkpoint dir>/captures/rank-K/step-N.pt`),
shipped to the run's folder in S3 beside its checkpoints, where `gpujob replay` finds them.

They are no checkpoints: no marker, never counted, pruned or pulled by a recovery (ckpt_store
skips the folder). Each file is written whole under its final name (a rename), so a file seen
once is shipped once: the list of what was sent is kept, not asked of S3 again. Stdlib only;
shipped beside the agent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import ckpt_store
import ckpt_sync

FOLDER = ckpt_store.CAPTURES


def found(root: Path) -> dict[str, int]:
    """`rank-K/step-N.pt` (and its `.json`) -> size, for the files written whole (not a
    `.tmp-` name)."""
    folder = root / FOLDER
    if not folder.is_dir():
        return {}
    return {
        path.relative_to(folder).as_posix(): path.stat().st_size
        for path in sorted(folder.glob("rank-*/step-*.*"))
        if path.suffix in (".pt", ".json") and path.is_file()
    }


@dataclass
class CaptureShipper:
    root: Path
    sync_to: str | None
    env: dict[str, str]
    say: Callable[[str], None]
    shipped: dict[str, int] = field(default_factory=dict)

    def ship(self) -> None:
        if not self.sync_to:
            return
        try:
            todo = {name: size for name, size in found(self.root).items()
                    if self.shipped.get(name) != size}  # fmt: skip
        except OSError:
            return  # the folder changed under the listing: the next look sees it
        for name, size in todo.items():
            dest = f"{self.sync_to}/{FOLDER}/{name}"
            try:
                ckpt_sync.rcat(self.env, self.root / FOLDER / name, size, dest)
            except (ckpt_sync.SyncError, OSError) as err:
                self.say(f"capture {name} not shipped to {dest}: {err}; tried again next look")
                continue
            self.shipped[name] = size
            self.say(f"capture {name} shipped to {dest}")
