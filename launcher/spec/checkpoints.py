"""A job's checkpoints as the spec states them: where, how often, how many kept, when one
is complete, where they sync to and under which run. The agent's checkpoint care
(`launcher/agent/ckpt_*.py`) carries these out on the host."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from launcher.spec.limits import StrictModel
from launcher.spec.remote import REMOTE_PATH

COMPLETE_FOLDER = re.compile(r"^(?:checkpoint|step|global_step)[-_]?\{step\}$")
"""The folder names ckpt_store.NAME recognises, with `{step}` in place of the number."""


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""A run's folder under `sync_to`: what a job id may be (plan.build.JOB_ID), one level."""


class CheckpointSpec(StrictModel):
    dir: str = Field(
        default="checkpoints",
        description="Relative to the job directory, or absolute on the host (mounted into a "
        "container at the same path).",
    )
    keep_last: int | None = Field(
        default=3,
        ge=1,
        description="Complete checkpoints the agent keeps on the host; null turns retention off.",
    )
    every_steps: int | None = Field(default=None, ge=1)
    sync_to: str | None = Field(
        default=None,
        description="`REMOTE:prefix`: a remote under `storage` (or the user config) and a "
        "prefix inside its bucket; each complete checkpoint is copied there.",
    )
    run: str | None = Field(
        default=None,
        description="The run its checkpoints and shipped logs belong to, a folder under "
        "`sync_to` (default: the job id, so runs never mix). Name one to continue a run on "
        "purpose: its checkpoints stay, and recovery resumes from its newest.",
    )
    complete_when: str | None = Field(
        default=None,
        description="How your trainer marks a save finished, as FOLDER/FILE with `{step}`: "
        "`step_{step}/DONE`. The folder is named checkpoint-N, step_N or global_step_N. Given, "
        "it is the only rule besides gpujob's own marker: only folders of that name holding "
        "that file are complete (no trainer_state.json, DCP .metadata or verl tracker).",
    )
    on_checkpoint: str | None = Field(
        default=None,
        description="Shell command run for each complete checkpoint, one at a time, output in "
        "the job log; it gets GPUJOB_CHECKPOINT (its path) and GPUJOB_CHECKPOINT_STEP.",
    )
    outputs: str | None = Field(
        default=None,
        description="Folder the `on_checkpoint` hook writes its results to (relative to the "
        "workdir on the host, or absolute): copied to the run's `outputs/` under `sync_to` "
        "after each hook ends, as what a hook writes inside its checkpoint is.",
    )
    size_gb: float | None = Field(
        default=None, gt=0, description="Size of one checkpoint, for the disk budget at submit."
    )
    params: int | None = Field(
        default=None, ge=1, description="Model parameters, to estimate the checkpoint size."
    )
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    optimizer: Literal["adamw", "sgd", "none"] = Field(
        default="adamw", description="Optimizer state saved with the weights (estimate only)."
    )

    @field_validator("outputs")
    @classmethod
    def _outputs_inside(cls, value: str | None) -> str | None:
        if value is not None and (".." in value.split("/") or not value.strip("/")):
            raise ValueError("a folder of the workdir (`eval`) or an absolute one; no `..`")
        return value

    @field_validator("dir")
    @classmethod
    def _relative(cls, value: str) -> str:
        """Relative to the job's folder, or an absolute folder of the host (a larger disk,
        `/ckpt/run`), mounted into a container at the same path; never `..`, never `/`."""
        if ".." in value.split("/") or not value.strip("/"):
            raise ValueError(
                "a folder inside the job directory (`checkpoints`), or an absolute folder of the "
                "host (`/ckpt/run`); no `..`"
            )
        return value

    @field_validator("complete_when")
    @classmethod
    def _completion_rule(cls, value: str | None) -> str | None:
        if value is None:
            return value
        folder, _, file = value.partition("/")
        if not COMPLETE_FOLDER.match(folder) or not file or ".." in file.split("/"):
            raise ValueError(
                "write it as FOLDER/FILE, the folder one of checkpoint-{step}, step_{step} or "
                "global_step_{step} (gpujob orders checkpoints by that step), e.g. "
                "`step_{step}/DONE`"
            )
        return value

    @field_validator("run")
    @classmethod
    def _run_name(cls, value: str | None) -> str | None:
        if value is not None and (
            not RUN_NAME.fullmatch(value) or COMPLETE_FOLDER.match(re.sub(r"\d+$", "{step}", value))
        ):
            raise ValueError(
                "a folder name: letters, digits, `.`, `_` and `-` (up to 128), not a "
                "checkpoint's name (`checkpoint-N`), e.g. `run: llama-sft`"
            )
        return value

    @field_validator("sync_to")
    @classmethod
    def _remote_path(cls, value: str | None) -> str | None:
        if value is not None and not REMOTE_PATH.match(value):
            raise ValueError(
                "write it as REMOTE:prefix, e.g. `lab:runs/quickstart` (REMOTE: letters, digits,"
                " `_`; the bucket comes from the remote)"
            )
        return value

    @property
    def estimated_bytes(self) -> int | None:
        """Weights plus optimizer state; AdamW keeps two fp32 moments (and an fp32 master copy
        when training in 16 bits), the usual 12-16 bytes per parameter."""
        if self.size_gb is not None:
            return int(self.size_gb * (1 << 30))
        if self.params is None:
            return None
        weight = 4 if self.dtype == "fp32" else 2
        state = {"adamw": 8, "sgd": 4, "none": 0}[self.optimizer]
        master = 4 if self.dtype != "fp32" and self.optimizer != "none" else 0
        return self.params * (weight + state + master)
