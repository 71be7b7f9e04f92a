"""The agent copied to every host: runs a job detached, owns its log, reports its exit code.

Standard library only (hosts may have nothing else). Its files are shipped as they are, so
nothing here may import from the rest of `launcher`.
"""

from pathlib import Path, PurePosixPath

AGENT_SOURCE = Path(__file__).with_name("agent.py")
AGENT_FILE = "gpujob-agent.py"
"""The agent's name on a host, in each job's folder."""
INIT_LOCK_SOURCE = Path(__file__).with_name("init_lock.py")
AGENT_OS_SOURCE = Path(__file__).with_name("agent_os.py")
"""The agent's OS helpers: shipped beside it wherever it goes."""
STATES_SOURCE = Path(__file__).with_name("states.py")
"""The job states, shipped beside the agent."""
RUNTIMES_SOURCE = Path(__file__).with_name("runtimes.py")
"""How a job runs there (bare or in a container), shipped beside the agent."""
STOPPING_SOURCE = Path(__file__).with_name("stopping.py")
"""A node's end as the agent reads it, and its cancel: shipped beside the agent."""
SUPERVISOR_SOURCE = Path(__file__).with_name("supervisor.py")
"""The process `start` forks to run and watch the job: shipped beside the agent."""
CHECKPOINT_SOURCES = tuple(
    str(Path(__file__).with_name(name))
    for name in ("ckpt_store.py", "ckpt_rclone.py", "ckpt_sync.py", "ckpt_tracker.py",
                 "ckpt_logs.py", "ckpt_watch.py", "ckpt_disk.py", "ckpt_captures.py")
)  # fmt: skip
"""Shipped beside the agent under the same names: it imports them as sibling modules."""
RESERVE_SOURCE = Path(__file__).with_name("reserve.py")
"""Room kept for a node's end on a disk the job may fill: shipped beside the agent."""
HUNG_SOURCE = Path(__file__).with_name("hung.py")
"""py-spy dumps of a job's running ranks (`cancel --dump-first`, the keep): shipped beside both."""
LIMITS_SOURCE = Path(__file__).with_name("limits.py")
"""The job's time and GPU-idle limits, kept on the host: shipped beside the agent."""
METRICS_SOURCES = tuple(str(Path(__file__).with_name(name))
                        for name in ("metrics.py", "tfevents.py", "log_read.py"))  # fmt: skip
"""The node's metrics and the log's reads for clients: shipped beside the agent."""
METRICS_JOB_FILE = "metrics-job.jsonl"
"""In the node's folder: where the job writes its figures (`$GPUJOB_METRICS`; metrics.py)."""
METRICS_RECORD = "metrics.jsonl"
"""In the node's folder: the agent's record (metrics.py); `node-N.metrics.jsonl` when shipped."""
RANK_MEMORY_SOURCE = Path(__file__).with_name("rank_memory.py")
"""The job's peak memory, per rank too: shipped beside the agent."""
REQUEUE_SOURCE = Path(__file__).with_name("requeue.py")
"""A SLURM job's requeue (`recovery:`): shipped beside the agent only for such a job."""
LIFECYCLE_SOURCE = str(Path(__file__).with_name("lifecycle_hooks.py"))
"""The job's lifecycle hooks: shipped beside the agent only for a job with `hooks:`."""
NOTIFY_SOURCE = str(Path(__file__).with_name("notify.py"))
"""Webhook posts of the job's end: shipped beside the agent only for a job with `notify:`."""
BUCKETS_SOURCE = str(Path(__file__).with_name("bucket_mounts.py"))
"""Bucket file_mounts' fetch and uploads: shipped beside the agent only for a job with them."""
AGENT_MODULES = (str(AGENT_OS_SOURCE), str(STATES_SOURCE), str(RUNTIMES_SOURCE),
                 str(STOPPING_SOURCE), str(SUPERVISOR_SOURCE), *CHECKPOINT_SOURCES,
                 str(LIMITS_SOURCE),
                 str(RESERVE_SOURCE), str(HUNG_SOURCE), str(RANK_MEMORY_SOURCE),
                 *METRICS_SOURCES)  # fmt: skip

REPLAY_SOURCE = Path(__file__).with_name("replay_run.py")
"""`gpujob replay`'s runner, beside the checkpoint modules where the step replays (not a job's)."""
CAPTURE_SOURCE = Path(__file__).parents[1] / "capture" / "gpujob_capture.py"
"""Not the agent's: the job's own helper (`import gpujob_capture`), shipped into `pylib/`."""

AUTOSTOP_FILE = "gpujob-autostop.py"
"""The autostop watcher's name on a host, in `~/.gpujob/autostop/`."""
AUTOSTOP_SOURCES = {
    AUTOSTOP_FILE: str(Path(__file__).with_name("autostop.py")),
    "autostop_call.py": str(Path(__file__).with_name("autostop_call.py")),
    "autostop_busy.py": str(Path(__file__).with_name("autostop_busy.py")),
    "agent_os.py": str(AGENT_OS_SOURCE),
    "gpujob-keep.py": str(Path(__file__).with_name("keep.py")),  # --keep-on-failure's arming
    "hung.py": str(HUNG_SOURCE),
}
"""What `up --autostop` ships to a host, by the name each has there (siblings keep theirs)."""


def agent_path(node_dir: str) -> str:
    """The agent beside a node's folder, in its job's folder on the host."""
    return str(PurePosixPath(node_dir).parent / AGENT_FILE)


def agent_argv(python: str, node_dir: str, command: str, *args: str) -> list[str]:
    """How every part of gpujob asks a node's agent for something: `start`, `status`,
    `cancel [GRACE_S]`, `read OFFSET [WAIT_S]` (see agent.py). `-S`: the agent is standard
    library only, and a follow or a controller starts it every second or two per node, where
    the site packages (their .pth files) cost a fifth of each start."""
    return [python, "-S", agent_path(node_dir), command, node_dir, *args]
