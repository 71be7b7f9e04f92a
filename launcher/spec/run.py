"""What each node runs (`run:`): a shell block, or a program and the launcher gpujob builds
around it, with the fields only some launchers honour refused elsewhere.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from launcher.spec.limits import StrictModel

EnvValue = Annotated[str, WithJsonSchema({"type": ["string", "number", "boolean"]})]
"""A string to the program; numbers and booleans in the YAML are accepted and converted."""


class FieldError(ValueError):
    """A cross-field check that blames one field, so the error can point at its line."""

    def __init__(self, loc: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


def env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError("an environment value must be a string, a number or a boolean")


LAUNCHERS = ("torchrun", "deepspeed", "accelerate", "ray", "none")
Launcher = Literal["torchrun", "deepspeed", "accelerate", "ray", "none"]
ONE_PER_NODE = ("none", "ray", "shell")
"""Launchers (and the shell block) that start one process per node, not ranks."""


class RunSpec(StrictModel):
    """What each node runs. `run: |` (a shell string) runs as written once per node, as in
    SkyPilot; the structured form names a program and the launcher gpujob builds around it."""

    shell: str | None = Field(
        default=None,
        description="Shell run once per node after `setup` (what `run: |` becomes); it gets "
        "GPUJOB_NODE_RANK, GPUJOB_NODE_IPS, ... and SkyPilot's SKYPILOT_* names.",
    )
    entrypoint: str | None = Field(default=None, description="Python script, relative to workdir.")
    module: str | None = Field(default=None, description="Python module to run with `-m`.")
    launcher: Launcher | None = Field(
        default=None,
        description="torchrun (default), deepspeed, accelerate, ray (a cluster across the nodes, "
        "the program as its driver on node 0) or none (plain python once per node).",
    )
    args: list[EnvValue] = Field(default_factory=list)
    nproc_per_node: int | None = Field(
        default=None,
        ge=1,
        description="Ranks per node for torchrun, deepspeed and accelerate; defaults to the GPUs "
        "per node, else 1. Launcher none, ray and a shell block start one process per node: "
        "there the world size (the plan's header, ${world_size}, the batch arithmetic) is the "
        "node count, and this field is refused.",
    )
    rdzv_port: int = Field(default=29400, ge=1, le=65535)
    rdzv_timeout_s: int = Field(
        default=300,
        ge=5,
        description="Bound on the c10d rendezvous, and on how long node 0 waits for the other "
        "nodes' `setup:` after its own (a node not heard by then ends the job, named).",
    )
    max_restarts: int = Field(default=0, ge=0, description="torchrun only.")
    serialize_init: bool = Field(
        default=False,
        description="Ranks import `init_imports` one at a time under a file lock (seed 001); "
        "torchrun only.",
    )
    ray_port: int = Field(
        default=6379,
        ge=1,
        le=65535,
        description="launcher: ray only: the head's port. The job's `ray stop` on the way out "
        "stops every Ray on the host, so give a Ray cluster of your own its own host.",
    )
    init_imports: list[str] = Field(default_factory=lambda: ["torch"])
    memory_limit_gb: float | None = Field(
        default=None, gt=0, description="RLIMIT_AS of every process of the job, in GiB."
    )

    @field_validator("args", mode="before")
    @classmethod
    def _args_are_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [env_value(item) for item in value]
        return value

    @model_validator(mode="before")
    @classmethod
    def _shell_string(cls, value: Any) -> Any:
        return {"shell": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_program(self) -> RunSpec:
        given = [name for name in ("shell", "entrypoint", "module") if getattr(self, name)]
        if self.shell is not None and len(given) == 1:
            if self.launcher is not None or self.args:
                raise FieldError(
                    ("run", "launcher" if self.launcher is not None else "args"),
                    "a shell `run:` runs as written on every node; `launcher` and `args` belong "
                    "to the structured form (`entrypoint` or `module`): remove it, or launch "
                    "the program yourself inside the shell block",
                )
            return self
        if len(given) != 1:
            raise ValueError(
                "give exactly one of a shell block (`run: |`), `entrypoint` (a script) or `module`"
            )
        return self

    @model_validator(mode="after")
    def _fields_its_launcher_honours(self) -> RunSpec:
        """A field the chosen launcher would ignore is refused, never silently dropped."""
        launcher = self.launcher_name
        named = "a shell `run:` block" if launcher == "shell" else f"launcher: {launcher}"
        if launcher != "torchrun":
            for name, unset in (("max_restarts", 0), ("serialize_init", False)):
                if getattr(self, name) != unset:
                    raise FieldError(("run", name), f"only torchrun honours it, not {named}; "
                                     "remove it, or use launcher: torchrun")  # fmt: skip
        if launcher in ONE_PER_NODE and self.nproc_per_node is not None:
            raise FieldError(
                ("run", "nproc_per_node"),
                f"{named} starts one process per node (the world size is the node count); "
                "remove it, or use torchrun, deepspeed or accelerate for ranks per node",
            )
        if launcher != "ray" and "ray_port" in self.model_fields_set:
            raise FieldError(("run", "ray_port"), f"only launcher: ray uses it, not {named}; "
                             "remove it")  # fmt: skip
        return self

    @property
    def launcher_name(self) -> str:
        """The launcher that runs the program: `shell` for a shell block."""
        return "shell" if self.shell is not None else (self.launcher or "torchrun")
