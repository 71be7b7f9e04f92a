"""SkyPilot 0.13-0.14 fields that gpujob reads and does not honour (yet), each one line that
names the field, says why, and what to do: instead of an unknown-key error, and alongside
every other error of the file (skypilot.py's `reader.collect()`). Run-time work for later
(pipelines of tasks, docker options) says "not supported yet by gpujob"; what
changes SkyPilot itself (`service:`, most `config:` keys) says that gpujob has no such thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from launcher.spec.sky_lifecycle import sky_hooks

if TYPE_CHECKING:
    from launcher.spec.skypilot import _Reader as Reader

NOT_YET = "not supported yet by gpujob"
CONFIG_NOT_YET = {
    "docker": (f"docker run options are {NOT_YET}",
               "leave them out; gpujob runs the container with the GPUs and /dev/shm"),
}  # fmt: skip
"""`config:` keys gpujob may honour later."""
GROUPS = (f"several YAML documents without `execution: parallel` in the first (a SkyPilot "
          f"pipeline: tasks one after another) are {NOT_YET}; a job group is read only by "
          "`gpujob submit`")  # fmt: skip
GROUPS_FIX = ("for tasks that run side by side, begin with a header document (`name:` and "
              "`execution: parallel`) and `gpujob submit` it; else submit each document as "
              "its own file")  # fmt: skip


def sky_config(reader: Reader) -> None:
    config = reader.data["config"]
    if not isinstance(config, Mapping):
        raise reader.refuse(("config",), "it must be a mapping of SkyPilot settings",
                            "remove it")  # fmt: skip
    for key in config:
        with reader.collect():
            loc = ("config", str(key))
            if key == "hooks":
                sky_hooks(reader, config[key])
                continue
            if key in CONFIG_NOT_YET:
                raise reader.refuse(loc, *CONFIG_NOT_YET[key])
            raise reader.refuse(loc, f"it changes SkyPilot itself (its `{key}` settings), "
                                "and gpujob has no such setting", "remove it")  # fmt: skip
