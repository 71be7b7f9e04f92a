"""A job's metrics as its agents recorded them (launcher/agent/metrics.py): each node's
`metrics.jsonl`, read from its folder through the job's target, or, where the host no longer
has it (gone, terminated, the folder removed), from the copy the agent shipped beside the
logs in S3 (`checkpoints.sync_to`, as `gpujob logs` reads the logs)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass, field

from launcher.agent import METRICS_RECORD
from launcher.errors import GpujobError
from launcher.state.db import JobRecord

NOT_FIGURES = ("t", "kind", "step")
Step = dict[str, float]
"""One step's figures with its `t` and `step` (numbers only)."""


@dataclass
class Sample:
    """The machine at one moment: each GPU's utilisation % and memory, the job tree's memory."""

    t: float
    gpu_util: list[float] = field(default_factory=list)
    gpu_mem_mib: list[float] = field(default_factory=list)
    rss_mib: float | None = None


@dataclass
class NodeMetrics:
    """One node's record: the job's figures per step, the machine's samples, and where the
    record was read (`host`, or the S3 address)."""

    rank: int
    source: str
    steps: list[Step] = field(default_factory=list)
    system: list[Sample] = field(default_factory=list)

    def names(self) -> list[str]:
        """The job's figures in the order first seen, the loss first."""
        seen = dict.fromkeys(k for s in self.steps for k in s if k not in NOT_FIGURES)
        names = list(seen)
        losses = [n for n in names if "loss" in n.lower()]
        return losses + [n for n in names if n not in losses]

    def series(self, name: str) -> tuple[list[float], list[float]]:
        """(x, y) of one figure: x its step where the record has one, else its order."""
        points = [(float(s.get("step", i)), float(s[name]))
                  for i, s in enumerate(self.steps) if name in s]  # fmt: skip
        return [x for x, _ in points], [y for _, y in points]

    def gpu_util(self) -> tuple[list[float], list[float]]:
        """(seconds since the first sample, mean utilisation % over the node's GPUs)."""
        samples = [s for s in self.system if s.gpu_util]
        start = samples[0].t if samples else 0.0
        return ([s.t - start for s in samples],
                [sum(s.gpu_util) / len(s.gpu_util) for s in samples])  # fmt: skip

    def as_json(self) -> dict[str, object]:
        return {"rank": self.rank, "source": self.source, "steps": self.steps,
                "system": [asdict(s) for s in self.system]}  # fmt: skip


def parse_record(rank: int, source: str, text: str) -> NodeMetrics:
    """A record's lines; one cut short (the agent appending as it is read) is skipped."""
    found = NodeMetrics(rank, source)
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or not _number(record.get("t")):
            continue
        if record.get("kind") == "sys":
            found.system.append(Sample(
                t=record["t"], gpu_util=_numbers(record.get("gpu_util")),
                gpu_mem_mib=_numbers(record.get("gpu_mem_mib")),
                rss_mib=record["rss_mib"] if _number(record.get("rss_mib")) else None))  # fmt: skip
        else:
            found.steps.append({k: v for k, v in record.items() if _number(v)})
    return found


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(value: object) -> list[float]:
    return [v for v in value if _number(v)] if isinstance(value, list) else []


def read_metrics(job: JobRecord) -> list[NodeMetrics]:
    """Each node's record in rank order, from its host where it still has it, else from S3.
    A node with neither has an empty record (the job may not have written any yet)."""
    from launcher.targets.base import close_all, target_for

    target = target_for(job)
    texts: dict[int, str | None] = {}
    try:
        nodes = target.nodes(job)
    except GpujobError:
        nodes = []
    try:
        for node in nodes:
            try:
                done = node.connection.run(["cat", f"{node.node_dir}/{METRICS_RECORD}"])
            except (GpujobError, OSError, EOFError):
                continue
            texts[node.rank] = done.stdout if done.ok else None
    finally:
        close_all([n.connection for n in nodes])
    found = []
    for rank in range(len(job.node_dirs)):
        text = texts.get(rank)
        if text is not None:
            found.append(parse_record(rank, "host", text))
        elif job.logs_to:
            where = f"{job.logs_to}/node-{rank}.{METRICS_RECORD}"
            found.append(parse_record(rank, where, _read_shipped(job, where)))
        else:
            found.append(NodeMetrics(rank, "none"))
    return found


def _read_shipped(job: JobRecord, where: str) -> str:
    from launcher.agent.ckpt_sync import rclone_env
    from launcher.storage import rclone_config
    from launcher.storage.remotes import credentials
    from launcher.storage.shipped_logs import shipped_remote

    remote = shipped_remote(job)
    env = rclone_env(rclone_config.env_vars(remote, credentials(remote)))
    done = subprocess.run(["rclone", "cat", where], env=env, capture_output=True, check=False)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise GpujobError(
            f"job {job.id}: its host no longer has its metrics and {where} cannot be read: "
            f"{said[-1] if said else done.returncode}",
            "the host may have gone before the agent shipped them (`gpujob storage tree`)",
        )
    return done.stdout.decode(errors="replace")
