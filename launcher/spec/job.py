"""The job spec: what a user writes in `jobs/*.yaml`.

Field names follow SkyPilot where users already know them (`resources.accelerators`, `setup`,
`run`, `envs`, `workdir`); `run` is structured rather than a shell string because gpujob
builds the torchrun line itself (rendezvous, node rank, per-node environment).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from launcher.spec.batch import BatchSpec, batch_refusal
from launcher.spec.bucket_mounts import MountSource
from launcher.spec.candidates import Candidates
from launcher.spec.checkpoints import CheckpointSpec
from launcher.spec.file_mounts import checked_mounts, file_modes
from launcher.spec.keep import KEEP_FIELD_HELP, MAX_KEEP_S, KeepWindow
from launcher.spec.lifecycle import GitWorkdir, HookSpec, checked_hf_mounts
from launcher.spec.limits import AutostopSpec, IdleGpuPolicy, Seconds, StrictModel
from launcher.spec.metrics import MetricsSpec
from launcher.spec.notify import NotifySpec
from launcher.spec.recovery import RecoverySpec
from launcher.spec.remote import ENV_NAME, REMOTE_NAME, S3Remote
from launcher.spec.run import ONE_PER_NODE, EnvValue, FieldError, RunSpec, env_value
from launcher.spec.shell_hazards import ChecksSpec
from launcher.spec.volume import VolumeSpec
from launcher.spec.web import Ports, TensorBoardSpec

ACCELERATORS = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_-]*)(:(?P<count>[1-9][0-9]*))?$")
CLASHING_ENV = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
FILESYSTEM_NAME = r"^[A-Za-z][A-Za-z0-9-]{0,59}$"
"""A Lambda filesystem's name as its API takes it (OpenAPI 1.10 FilesystemCreateRequest)."""
MAX_NODES = 1024
"""The most nodes one job may ask for (stated in `gpujob schema`): a plan is linear in the
node count, but a typo (`nodes: 100000`) should be a line, not a minute of planning."""

GPUJOB_SETS = ("MASTER_ADDR", "MASTER_PORT")
"""Set by gpujob on every node (with every GPUJOB_* and SKYPILOT_* name): not the spec's."""
THE_JOBS_OWN = ("GPUJOB_CAPTURE_EVERY", "GPUJOB_CAPTURE_STEPS")
"""Read by gpujob_capture in the job, never set by gpujob: the spec's to set."""


def reserved_env(name: str) -> str | None:
    """Why `name` may not be set by the spec, or None: gpujob sets it on every node (run.sh
    exports it after the spec's own), so the spec's value would be silently replaced.
    SKYPILOT_DOCKER_* are a registry login, not a node variable (skypilot-task.md §2);
    SKYPILOT_JOBGROUP_* reach a job group's tasks through their envs (spec/job_group.py)."""
    if name.startswith(("SKYPILOT_DOCKER_", "SKYPILOT_JOBGROUP_")) or name in THE_JOBS_OWN:
        return None
    if name.startswith(("GPUJOB_", "SKYPILOT_")) or name in GPUJOB_SETS:
        return f"`{name}` is set by gpujob on every node (the node's own value); rename it"
    return None


class Resources(StrictModel):
    accelerators: str | None = Field(
        default=None, description="GPU type and count per node, e.g. `A100:8`; none means CPU."
    )
    cpus: int | None = Field(default=None, ge=1)
    memory_gb: float | None = Field(default=None, gt=0)
    disk_gb: int = Field(default=50, ge=1, description="Free disk needed on each node.")
    shm_gb: int = Field(default=16, ge=1, description="/dev/shm size of the job container.")
    filesystem: str | None = Field(
        default=None, min_length=1, max_length=60, pattern=FILESYSTEM_NAME,
        description="`submit --up` on Lambda: this persistent filesystem is attached to each "
        "host (with --yes, made in the cheapest offer's region if you have none of that name), "
        "mounted at /lambda/nfs/NAME; offers narrow to its region.",
    )  # fmt: skip
    volume: VolumeSpec | None = Field(
        default=None, description="`submit --up` on Vast: a volume attached (spec/volume.py)."
    )
    idle_gpu: IdleGpuPolicy | None = None
    autostop: AutostopSpec | None = Field(
        default=None, description="For hosts `submit --up` rents; `up --autostop` for others."
    )
    max_hourly_cost: float | None = Field(
        default=None, gt=0,
        description="`submit --up`: highest $/hour per host (SkyPilot's name; --max-price wins).",
    )  # fmt: skip
    use_spot: bool = Field(
        default=False,
        description="`submit --up` rents interruptible hosts at a bid (Vast; refused on Lambda, "
        "which has none); an outbid host is stopped.",
    )
    candidates: Candidates | None = Field(
        default=None, description="GPUs the job can run on (SkyPilot's any_of/ordered): "
        "`submit --up` alone rents the cheapest (or first servable) of them.",
    )  # fmt: skip

    @field_validator("accelerators")
    @classmethod
    def _accelerators_form(cls, value: str | None) -> str | None:
        if value is not None and not ACCELERATORS.match(value):
            raise ValueError("write it as NAME or NAME:COUNT, e.g. `A100:8` or `H100`")
        return value

    @property
    def gpu_name(self) -> str | None:
        if self.accelerators is None:
            return None
        return self.accelerators.split(":")[0]

    @property
    def gpus_per_node(self) -> int:
        if self.accelerators is None:
            return 0
        match = ACCELERATORS.match(self.accelerators)
        assert match is not None
        return int(match.group("count") or 1)


class MergeSpec(StrictModel):
    """A job that trains, then merges its LoRA adapter into the base: after the run succeeds,
    node 0 checks the adapter's own config and merges (seed 002: never onto a quantized base)."""

    adapter: str = Field(
        description="Folder with adapter_config.json: checked at submit where it is already "
        "here (relative to the spec); else the job writes it (relative to the workdir on the "
        "host) and `base` must be named."
    )
    base: str | None = Field(
        default=None, description="The base the job merges into; default: the adapter's own."
    )
    into: str | None = Field(
        default=None,
        description="Where the merged model is saved, relative to the workdir on the host; "
        "default: the adapter's folder with `-merged` appended.",
    )


def _or_shell_block(schema: dict[str, Any]) -> None:
    """`run:` may also be a string, a shell block (RunSpec's before-validator takes it), which
    the schema must allow too, or an editor flags every SkyPilot-style spec."""
    ref = schema.pop("$ref")
    schema["anyOf"] = [
        {"$ref": ref},
        {
            "type": "string",
            "description": "A shell block run once per node after `setup`, as SkyPilot runs it.",
        },
    ]


class JobSpec(StrictModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")
    image: str = Field(
        description="An image definition under images/ (e.g. `lab-cpu`) or a path to one "
        "(`../images/x.yaml`), a full image name, or `host` to use the host's Python as it is."
    )
    resources: Resources = Field(default_factory=Resources)
    nodes: int = Field(default=1, ge=1, le=MAX_NODES, description="Machines the job runs on.")
    workdir: str | None = Field(
        default=".",
        description="Shipped to each node; relative to the spec. `null`: nothing is shipped "
        "(the job's workdir starts empty), as for a SkyPilot task without `workdir`.",
    )
    setup: str | None = Field(default=None, description="Shell run once per node before `run`.")
    file_mounts: dict[str, MountSource] = Field(
        default_factory=dict,
        description="Local files and folders shipped to every node: destination (absolute, "
        "`~/...`, or relative to the workdir) -> source on this machine (absolute or `~/...`); "
        "a folder's contents go into the destination. Mounted at the same path in a container. "
        "A bucket source (`s3://...`, `gs://`, `r2://`, `REMOTE:path`, or `{source, mode}`) is "
        "fetched onto every node before setup (see BucketMount).",
    )
    run: RunSpec = Field(json_schema_extra=lambda schema: _or_shell_block(schema))
    workdir_git: GitWorkdir | None = Field(
        default=None,
        description="A git repository cloned on the node as the workdir (nothing shipped).",
    )
    hf_mounts: dict[str, str] = Field(
        default_factory=dict,
        description="Hugging Face repositories fetched on each node before `setup` (`hf "
        "download`, HF_TOKEN from envs/secrets): destination -> hf://ORG/NAME[@REV][/PATH].",
    )
    hooks: list[HookSpec] = Field(
        default_factory=list, description="Lifecycle hooks (SkyPilot's `config.hooks`)."
    )
    batch: BatchSpec = Field(default_factory=BatchSpec)
    envs: dict[str, EnvValue] = Field(default_factory=dict)
    nccl: dict[str, EnvValue] = Field(default_factory=dict, description="NCCL_* variables.")
    secrets: list[str] = Field(
        default_factory=list, description="Names of variables taken from your environment."
    )
    unset_envs: list[str] = Field(
        default_factory=list,
        description="Variables removed from every process of the job, however the image or host "
        "sets them (ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES always are).",
    )
    checkpoints: CheckpointSpec = Field(default_factory=CheckpointSpec)
    checks: ChecksSpec = Field(
        default_factory=ChecksSpec,
        description="Hazard checks of `run:`/`setup:` (batch arithmetic of the envs, merge "
        "guard); `off` silences one where gpujob is wrong.",
    )
    recovery: RecoverySpec | None = Field(
        default=None, description="Restart on fresh hosts when a host is lost (`submit --up`)."
    )
    storage: dict[str, S3Remote] = Field(
        default_factory=dict, description="S3 remotes by name; the user config adds more."
    )
    merge: MergeSpec | None = None
    keep_on_failure: KeepWindow | None = Field(
        default=None, le=MAX_KEEP_S, description=KEEP_FIELD_HELP
    )
    ports: Ports = Field(
        default_factory=list,
        description="Ports served on the head node (8080, "
        '"8000-8010", a list): `gpujob port-forward JOB` reaches them.',
    )
    tensorboard: TensorBoardSpec | None = Field(default=None, description="`gpujob tb JOB`.")
    notify: list[NotifySpec] = Field(
        default_factory=list,
        description="Webhooks told of the job's end, besides the user config's.",
    )
    metrics: MetricsSpec | None = Field(
        default=None,
        description="The job's figures from its log; `$GPUJOB_METRICS` is always read.",
    )
    max_duration: Seconds | None = Field(
        default=None,
        description="Time limit of the job (`30m`, `2h`, seconds): the agent stops it with its "
        "grace, syncs the last checkpoint, and the job ends `timed out`.",
    )
    profile: str | None = Field(default=None, description="Which entry of `profiles` applied.")
    profiles: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Named overrides, chosen with `--set profile=NAME`."
    )
    _file_modes: dict[str, int] = PrivateAttr(default_factory=dict)
    """Each single-file mount's permission bits, read from this machine with the spec."""

    @field_validator("envs", "nccl", mode="before")
    @classmethod
    def _env_values(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: env_value(item) for key, item in value.items()}
        return value

    @field_validator("envs", "nccl")
    @classmethod
    def _env_names(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for key in value:
            if not ENV_NAME.match(key):
                raise ValueError(f"`{key}` is not a valid environment variable name")
            reserved = reserved_env(key)
            if reserved:
                raise FieldError((str(info.field_name), key), reserved)
            if key in CLASHING_ENV:
                raise ValueError(
                    f"`{key}` is a ROCm variable that breaks CUDA jobs (seed 004); gpujob unsets"
                    " it on every node, so remove it"
                )
        return value

    @field_validator("nccl")
    @classmethod
    def _nccl_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.startswith(("NCCL_", "TORCH_NCCL_")):
                raise ValueError(f"`{key}` is not an NCCL variable; put it under `envs`")
        return value

    @field_validator("file_mounts")
    @classmethod
    def _mounts_exist_here(cls, value: dict[str, MountSource]) -> dict[str, MountSource]:
        return checked_mounts(value)

    @field_validator("hf_mounts")
    @classmethod
    def _hf_sources(cls, value: dict[str, str]) -> dict[str, str]:
        return checked_hf_mounts(value)

    @model_validator(mode="after")
    def _mount_modes(self) -> JobSpec:
        self._file_modes = file_modes(self.file_mounts)
        return self

    def file_mount_mode(self, dst: str) -> int:
        """The permission bits a single-file mount keeps on the host."""
        return self._file_modes.get(dst, 0o644)

    @field_validator("storage")
    @classmethod
    def _remote_names(cls, value: dict[str, S3Remote]) -> dict[str, S3Remote]:
        for key in value:
            if not REMOTE_NAME.match(key):
                raise ValueError(
                    f"remote name `{key}`: letters, digits and `_` (rclone's env form)"
                )
        return value

    @field_validator("secrets", "unset_envs")
    @classmethod
    def _secret_names(cls, value: list[str]) -> list[str]:
        return each_matching(value, ENV_NAME, "is not a valid environment variable name")

    @field_validator("secrets")
    @classmethod
    def _secrets_leave_docker_alone(cls, value: list[str]) -> list[str]:
        """The agent runs `docker run --env NAME` with the secrets in docker's environment:
        a PATH or DOCKER_* secret would change which docker runs, or where it connects."""
        for name in value:
            if name == "PATH" or name.startswith("DOCKER_"):
                raise ValueError(f"`{name}` cannot be a secret: it would change how the host "
                                 "runs docker; put its value under another name")  # fmt: skip
        return value

    @model_validator(mode="after")
    def _batch_divides(self) -> JobSpec:
        self.grad_accum_steps  # noqa: B018 - raises when the batch does not divide
        overlap = set(self.secrets) & set(self.envs)
        if overlap:
            raise FieldError(
                ("secrets",), f"{sorted(overlap)} is both in `envs` and `secrets`; keep one"
            )
        return self

    @model_validator(mode="after")
    def _volume_on_one_node(self) -> JobSpec:
        """A Vast volume lives on one machine: one node can have it."""
        if self.resources.volume is not None and self.nodes > 1:
            raise FieldError(("resources", "volume"), "a Vast volume lives on one machine: it "
                             "is for a job of one node (checkpoints.sync_to shares)")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _accelerate_has_gpus(self) -> JobSpec:
        """`accelerate launch --cpu` runs its simple launcher: N copies that never connect."""
        cpu = not self.resources.gpus_per_node
        if self.run.launcher == "accelerate" and cpu and self.world_size > 1:
            raise FieldError(
                ("run", "launcher"),
                f"launcher: accelerate needs GPUs for more than one process (world size "
                f"{self.world_size} on CPU would train unconnected copies); use torchrun, "
                "or name GPUs in resources.accelerators",
            )
        return self

    @property
    def nproc_per_node(self) -> int:
        """Processes per node: one for launcher none, ray and a shell block (whatever a shell
        block starts itself is its own business)."""
        if self.run.launcher_name in ONE_PER_NODE:
            return 1
        if self.run.nproc_per_node is not None:
            return self.run.nproc_per_node
        return self.resources.gpus_per_node or 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def grad_accum_steps(self) -> int | None:
        """global_batch / (world_size * micro_batch): the number users get wrong by hand."""
        batch = self.batch
        if batch.global_batch is None or batch.micro_batch is None:
            return None
        per_step = self.world_size * batch.micro_batch
        if batch.global_batch % per_step:
            raise FieldError(("batch", "global_batch"), batch_refusal(
                batch.global_batch, self.world_size, batch.micro_batch
            ))  # fmt: skip
        return batch.global_batch // per_step


def each_matching(values: list[str], pattern: re.Pattern[str], refusal: str) -> list[str]:
    """`values` when every one matches `pattern`; else the first that does not, refused."""
    for item in values:
        if not pattern.match(item):
            raise ValueError(f"`{item}` {refusal}")
    return values
