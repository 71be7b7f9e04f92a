"""The Plan: everything gpujob will write and run, per node, as plain data.

`--dry-run` prints this object; the apply side executes it and nothing else (TorchX's
`AppDryRunInfo` shape). Paths are relative to the node's job directory unless absolute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

Runtime = Literal["bare", "docker"]

UNKNOWN_HOME = "/.gpujob-unknown-home"
"""The home folder a dry run assumes on hosts it did not contact. Shell-safe, so quoting
leaves the paths under it whole; the dry run shows it as `HOME_SHOWN` (plan/show.py), a
placeholder nobody takes for a path, where a `~` would read as one (and, quoted, not expand)."""
HOME_SHOWN = "<home>"


@dataclass(frozen=True)
class WriteFile:
    """A file to write atomically on the node; `secret` files are never shown."""

    path: str
    content: str
    mode: int = 0o644
    secret: bool = False


@dataclass(frozen=True)
class CopyFile:
    """A file shipped from this machine (the agent, for one)."""

    source: str
    path: str
    mode: int = 0o644


@dataclass(frozen=True)
class SyncDir:
    """The workdir shipped into `path` on the node, minus `excludes` and what its
    `.gpujobignore`/`.gitignore` exclude; only files whose size or mtime differ move. With
    `mirror` (a remote host's lasting copy of the workdir), files gone here are deleted
    there; the plan then copies that folder into the job's own (a RunCommand), so a job never
    sees a later submit's files."""

    source: str
    path: str
    excludes: tuple[str, ...] = ()
    mirror: bool = False


@dataclass(frozen=True)
class SecretInput:
    """Secrets a command reads on its standard input (one JSON object): the start's, which
    the agent keeps in memory, so no secret lands in a file on the host. `names` are what
    the dry run shows; the values never are."""

    content: str = field(repr=False)
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunCommand:
    """A command run on the node; `argv` is literal, never re-split by a shell. `reads_log`:
    the start also answers the log's first bytes (the follow starts from them); `hint`:
    what to look at when it fails, if the command line itself says little; `input`: the
    secrets it reads on its stdin."""

    argv: tuple[str, ...]
    why: str
    starts_job: bool = False
    reads_log: bool = False
    hint: str | None = None
    input: SecretInput | None = None


Step = WriteFile | CopyFile | SyncDir | RunCommand


@dataclass(frozen=True)
class NodeLayout:
    """Where the nodes run, as far as planning needs to know."""

    provider: str
    runtime: Runtime
    hosts: tuple[str, ...]
    addresses: tuple[str, ...]
    job_root: str
    python: str
    agent_python: str
    env_root: str
    gpus_per_node: int = 0
    image_ref: str | None = None
    host_gpus: int = 0
    raise_memlock: bool = True  # False where the host cannot lift RLIMIT_MEMLOCK (no CAP)
    image_present: bool = False  # every host has the image (its facts said): no pull step
    on_this_machine: bool = False
    """The nodes are processes of this machine: files go straight into the job's folder."""
    sandbox: bool = False
    """The user's own machine: the job writes only inside its folder. Its HOME is the job's
    `home/` (where `~/...` file_mounts land), an absolute destination is refused (bare) or
    mounted from the job's folder (container), and `image: host` runs in a venv of the job's
    own made from the host's `python` (plan/sandbox.py)."""
    hidden_path: tuple[str, ...] = ()
    """PATH entries no process of the job sees: the bin of the venv gpujob runs from."""
    shared_cache: str = ""
    """XDG_CACHE_HOME of sandboxed jobs (pip's, Hugging Face's, torch's caches), under
    gpujob's own cache dir, so each job does not download them again."""

    @property
    def distinct_hosts(self) -> list[str]:
        return list(dict.fromkeys(self.hosts))

    @cached_property
    def one_machine(self) -> bool:
        """Asked once per node: cached, or planning N nodes would read N addresses N times."""
        return len(set(self.addresses)) <= 1 and all(h == self.hosts[0] for h in self.hosts)


@dataclass(frozen=True)
class HostFacts:
    """A host as `launcher.remote.facts` read it: what planning for it needs to know."""

    home: str
    python: str
    version: str
    docker: bool
    gpus: int
    memlock_unlimited: bool = True
    free_bytes: int | None = None
    """Free space where the job folders go (the nearest folder of ~/.gpujob/jobs there is)."""
    free_at: str = ""
    images: frozenset[str] = frozenset()
    """The images Docker has there (`REPOSITORY:TAG`): a job's that is among them is not
    looked for again before its start."""
    arch: str = ""
    user: str = ""
    os_name: str = ""
    gpu_names: tuple[str, ...] = ()
    driver: str | None = None
    shm_bytes: int | None = None


@dataclass(frozen=True)
class ReachCheck:
    """Before any node starts: every other host opens a TCP connection to node 0's
    rendezvous port (a listener held there for the check), so a firewall or a wrong address
    fails in seconds instead of as a rendezvous timeout minutes later."""

    host: str
    address: str
    port: int
    from_hosts: tuple[str, ...]
    listen: tuple[str, ...]
    """Run on `host` while the others dial; prints how many connections it took."""
    dial: tuple[str, ...]
    """Run on each of `from_hosts`."""
    timeout_s: int
    port_field: str = "run.rdzv_port"
    """The spec field that sets `port`, named by the failure's fix."""


@dataclass(frozen=True)
class NodePlan:
    rank: int
    host: str
    job_dir: str
    node_dir: str
    steps: tuple[Step, ...]
    on_failure: RunCommand | None = None
    """Run once this node has started if a later node then fails to start: all or none."""

    @property
    def start(self) -> RunCommand:
        return next(s for s in self.steps if isinstance(s, RunCommand) and s.starts_job)

    @property
    def preparation(self) -> tuple[Step, ...]:
        """Everything before the start: one batch (one exec) on the node's host."""
        return tuple(s for s in self.steps if not (isinstance(s, RunCommand) and s.starts_job))


@dataclass(frozen=True)
class JobLimits:
    """The limits each node's agent keeps (job.json's `max_duration_s` and `idle_gpu`): the
    time limit stops the job with its grace and it ends `timed out`; `idle_gpu` is the
    spec's policy as written (`below_percent`, `minutes`, `action`)."""

    max_duration_s: float | None
    grace_s: int
    idle_gpu: dict[str, object] | None = None
    sync_to: str | None = None
    """Where the last checkpoint goes before a timed-out job ends, if anywhere."""


@dataclass(frozen=True)
class Plan:
    job_id: str
    name: str
    provider: str
    runtime: Runtime
    world_size: int
    nproc_per_node: int
    grad_accum_steps: int | None
    nodes: tuple[NodePlan, ...]
    derived: dict[str, str] = field(default_factory=dict)
    checks: tuple[ReachCheck, ...] = ()
    image_ref: str | None = None
    logs_to: str | None = None
    """Where the agents ship each node's log (beside the checkpoints in S3), if anywhere."""
    limits: JobLimits | None = None
    one_process_per_node: bool = False
    """launcher none, ray or a shell block: one process per node, not ranks (the header says so)."""
    buckets: tuple[str, ...] = ()
    """The dry run's line for each bucket file_mount (plan/bucket_mounts.py)."""

    @property
    def node_dirs(self) -> list[str]:
        return [node.node_dir for node in self.nodes]

    @property
    def starts_in_batch(self) -> bool:
        """A job of one node starts at the end of its preparation batch; one of several
        only once every node is prepared and the checks have passed, node by node."""
        return len(self.nodes) == 1 and not self.checks
