"""SkyPilot 0.14's `config.hooks`, `workdir: {url, ref}` and `hf://` sources, translated into
gpujob's own fields (spec/lifecycle.py checks them with the rest of the spec, so every
mistake of a file is said at once, each at its line).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.spec.skypilot import _Reader as Reader


def sky_hooks(reader: Reader, hooks: Any) -> None:
    """`config.hooks` -> `hooks`: checked by spec/lifecycle.HookSpec, blamed on their lines."""
    if not isinstance(hooks, list):
        raise reader.refuse(("config", "hooks"), "it must be a list of {run, events, timeout}",
                            "write `- run: |` entries")  # fmt: skip
    why = " (run by the agent at each event; output in `gpujob logs`)"
    reader.put(("hooks",), ("config", "hooks"), hooks, why=why)


def git_workdir(reader: Reader) -> None:
    """`workdir: {url, ref}` -> `workdir_git`; nothing is shipped from this machine."""
    workdir = reader.data["workdir"]
    if not isinstance(workdir, Mapping):
        raise reader.refuse(("workdir",), "it must be a folder or {url: ..., ref: ...}",
                            "give one of the two")  # fmt: skip
    reader.out.data["workdir"] = None  # nothing of this machine's: the clone is the workdir
    reader.out.origins[("workdir",)] = reader.where("workdir")
    why = " (cloned on the node into the job's workdir, before file_mounts and setup)"
    reader.put(("workdir_git",), ("workdir",), dict(workdir), why=why)


def hf_mount(reader: Reader, loc: tuple[str, str], src: str, envs: Mapping[str, str]) -> None:
    """An `hf://` source -> `hf_mounts`, at its destination as SkyPilot reads it (envs
    substituted; `~/sky_workdir/...` is inside the job's workdir)."""
    from launcher.spec.sky_file_mounts import ENV_REF

    path = ENV_REF.sub(lambda m: envs.get(m.group(1), m.group(0)), loc[1])
    path = path.removeprefix("~/sky_workdir/")
    why = " (fetched on each node with `hf download` before setup; HF_TOKEN from envs/secrets)"
    reader.put(("hf_mounts", path), loc, src, why=why)
