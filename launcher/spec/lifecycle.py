"""SkyPilot 0.14's run-time fields, in gpujob's own spec: lifecycle `hooks` (SkyPilot's
`config.hooks`), a git workdir (`workdir: {url, ref}`, here `workdir_git`) and Hugging Face
sources (`hf://` in `file_mounts`, here `hf_mounts`). Each is done on the node: the hooks by
the agent at the event (agent/lifecycle_hooks.py), the clone and the downloads by the plan
before `setup` (plan/node_sources.py).

Hooks as SkyPilot documents them (reference/lifecycle-hooks): `run` required, `events` a
subset of stop/preemption/down (all three when left out), `timeout` seconds (default 3600,
at least 1); run in their order, and a hook that fails or times out never holds the event up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator

from launcher.spec.limits import StrictModel

EVENTS = ("stop", "preemption", "down")
HOOK_TIMEOUT_S = 3600
GIT_URL = re.compile(r"^(https?://|ssh://|git://|file://|[\w.-]+@[\w.-]+:)\S+$")
HF_URL = re.compile(
    r"^hf://(?:(?P<kind>datasets|spaces|models)/)?(?P<repo>[\w.-]+/[\w.-]+)"
    r"(?:@(?P<rev>[^/\s]+))?(?:/(?P<path>\S+))?$"
)
HF_FORM = ("write hf://ORG/NAME for a model, hf://datasets/ORG/NAME or hf://spaces/ORG/NAME, "
           "with @REVISION and a /PATH inside it if wanted")  # fmt: skip


class HookSpec(StrictModel):
    run: str = Field(min_length=1, description="Shell script run on node 0 at each event.")
    events: list[Literal["stop", "preemption", "down"]] = Field(
        default_factory=lambda: list(EVENTS),
        min_length=1,
        description="When it runs: `stop` (a cancel), `preemption` (the cloud's notice), "
        "`down` (before `gpujob down` terminates the host).",
    )
    timeout: int = Field(
        default=HOOK_TIMEOUT_S, ge=1, description="Seconds it may run; then it is stopped."
    )


class GitWorkdir(StrictModel):
    url: str = Field(description="The repository, cloned on the node into the job's workdir.")
    ref: str | None = Field(default=None, description="Branch, tag or commit checked out.")

    @field_validator("url")
    @classmethod
    def _url_form(cls, value: str) -> str:
        if not GIT_URL.match(value):
            raise ValueError(f"{value} is not a git URL; give https://..., ssh://..., "
                             "git@HOST:PATH or file://...")  # fmt: skip
        return value

    @field_validator("ref")
    @classmethod
    def _ref_form(cls, value: str | None) -> str | None:
        if value is not None and (not value or value.startswith("-") or " " in value):
            raise ValueError(f"`{value}` is not a branch, tag or commit")
        return value


@dataclass(frozen=True)
class HfSource:
    """One `hf://` source, as `hf download` takes it."""

    repo: str
    kind: str  # model, dataset or space (`--repo-type`)
    revision: str | None
    path: str | None  # a file or folder inside the repository; None: all of it


def hf_source(url: str) -> HfSource:
    found = HF_URL.match(url)
    if not found:
        raise ValueError(f"{url} is not a Hugging Face source; {HF_FORM}")
    kind = (found["kind"] or "models").removesuffix("s")
    path = (found["path"] or "").strip("/") or None
    return HfSource(found["repo"], kind, found["rev"], path)


def checked_hf_mounts(value: dict[str, str]) -> dict[str, str]:
    """Each destination as file_mounts' are, each source an `hf://` one; blamed on its line."""
    from launcher.spec.file_mounts import destination_problem
    from launcher.spec.run import FieldError

    for dst, src in value.items():
        problem = destination_problem(dst)
        try:
            if problem:
                raise ValueError(problem)
            hf_source(src)
        except ValueError as err:
            raise FieldError(("hf_mounts", dst), str(err)) from None
    return value
