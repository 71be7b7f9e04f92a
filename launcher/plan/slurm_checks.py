"""What a SLURM cluster says about its partitions (parsed from `sinfo`/`scontrol` text) and
the refusals before anything is queued, one line each naming the field (pure, no I/O)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from launcher.errors import UsageError
from launcher.plan.slurm import MARGIN_MIN, SlurmCluster, sbatch_minutes, time_minutes
from launcher.spec.job import JobSpec


@dataclass(frozen=True)
class Partition:
    """One partition as `sinfo` and `scontrol show partition` describe it; per-node numbers
    are the largest node's (a request fits if it fits one node)."""

    name: str
    up: bool = True
    default: bool = False
    nodes: int = 0
    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0
    features: frozenset[str] = frozenset()
    max_time_min: int | None = None
    allow_accounts: tuple[str, ...] | None = None
    """None: ALL."""
    deny_accounts: tuple[str, ...] = ()
    allow_qos: tuple[str, ...] | None = None


SINFO_ARGV = ("sinfo", "-h", "-o", "%P|%a|%l|%D|%c|%m|%G|%f")
PARTITIONS_ARGV = ("scontrol", "-o", "show", "partition")


def parse_sinfo(text: str) -> dict[str, Partition]:
    """`sinfo -h -o '%P|%a|%l|%D|%c|%m|%G|%f'`: one line per partition and node shape."""
    found: dict[str, Partition] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 8:
            continue
        name, avail, _limit, nodes, cpus, memory, gres, features = parts
        default = name.endswith("*")
        name = name.rstrip("*")
        shape = Partition(
            name=name, up=avail == "up", default=default, nodes=_int(nodes), cpus=_int(cpus),
            memory_mb=_int(memory), gpus=gpu_count(gres),
            features=frozenset(f for f in features.split(",") if f and f != "(null)"),
        )  # fmt: skip
        had = found.get(name)
        if had is not None:
            shape = replace(
                shape, up=had.up or shape.up, nodes=had.nodes + shape.nodes,
                cpus=max(had.cpus, shape.cpus), memory_mb=max(had.memory_mb, shape.memory_mb),
                gpus=max(had.gpus, shape.gpus), features=had.features | shape.features,
            )  # fmt: skip
        found[name] = shape
    return found


def gpu_count(gres: str) -> int:
    """`gpu:4`, `gpu:a100:8(S:0-1)`, `gpu:a100:4,gpu:v100:2` -> one node's GPUs, all types
    summed (a node's GRES string lists each of its types)."""
    counts = [int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,(]+)?:(\d+)", gres)]
    return sum(counts)


def parse_partitions(text: str, sinfo: dict[str, Partition]) -> dict[str, Partition]:
    """`scontrol -o show partition` (one line each) added to sinfo's view: the time limit,
    who may use it, which is the default."""
    merged = dict(sinfo)
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        name = fields.get("PartitionName")
        if not name:
            continue
        base = merged.get(name, Partition(name=name))
        merged[name] = replace(
            base,
            default=fields.get("Default") == "YES" or base.default,
            up=fields.get("State", "UP") == "UP",
            max_time_min=minutes(fields.get("MaxTime", "UNLIMITED")),
            allow_accounts=_listed(fields.get("AllowAccounts", "ALL")),
            deny_accounts=_listed(fields.get("DenyAccounts", "")) or (),
            allow_qos=_listed(fields.get("AllowQos", "ALL")),
        )
    return merged


def minutes(text: str) -> int | None:
    """SLURM's times (`60`, `2:00`, `01:00:00`, `1-00:00:00`) in minutes; None: unlimited."""
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if len(parts) == 1:
        hours, mins, secs = 0, parts[0], 0
    elif len(parts) == 2:
        hours, mins, secs = 0, parts[0], parts[1]
    else:
        hours, mins, secs = parts[-3], parts[-2], parts[-1]
    return (int(days or 0) * 24 + hours) * 60 + mins + math.ceil(secs / 60)


def _listed(text: str) -> tuple[str, ...] | None:
    if text in ("ALL", ""):
        return None if text == "ALL" else ()
    return tuple(text.split(","))


def _int(text: str) -> int:
    match = re.match(r"\d+", text)
    return int(match.group()) if match else 0


def check_request(
    spec: JobSpec, cluster: SlurmCluster, partitions: dict[str, Partition], where: dict[str, str]
) -> Partition:
    """Every refusal before anything is queued, one line each naming the field (exit 2):
    the partition, the node count, GPUs, CPUs and memory per node, the time limit, the
    account and the QOS. `where` maps the spec's fields to `file:line`."""
    at = cluster.partition_where or cluster.where
    if cluster.partition is not None:
        part = partitions.get(cluster.partition)
        if part is None:
            known = ", ".join(sorted(partitions)) or "none"
            raise UsageError(
                f"{at}: partition: {cluster.partition!r} does not exist on cluster "
                f"{cluster.name} (its partitions: {known})",
                "name one of them in hosts.yaml, or as --on slurm:LOGIN/PARTITION",
            )
    else:
        default = [p for p in partitions.values() if p.default]
        if not default:
            raise UsageError(
                f"{at}: partition: none given and cluster {cluster.name} has no default partition",
                f"name one of {', '.join(sorted(partitions))} in hosts.yaml",
            )
        part = default[0]
    name = f"partition {part.name}"
    if not part.up:
        raise UsageError(f"{at}: partition: {part.name} is not up (sinfo says so)")
    if spec.nodes > part.nodes:
        raise UsageError(f"{where['nodes']}: nodes: {spec.nodes}, but {name} has "
                         f"{part.nodes} node(s)")  # fmt: skip
    gpus = spec.resources.gpus_per_node
    if gpus > part.gpus:
        have = f"at most {part.gpus}" if part.gpus else "none"
        raise UsageError(
            f"{where['accelerators']}: resources.accelerators: {gpus} GPU(s) per node, but "
            f"the nodes of {name} have {have} (sinfo's GRES)",
            "ask for fewer GPUs per node, or another partition",
        )
    cpus = spec.resources.cpus
    if cpus is not None and part.cpus and cpus > part.cpus:
        raise UsageError(f"{where['cpus']}: resources.cpus: {cpus} per node, but the nodes of "
                         f"{name} have {part.cpus}")  # fmt: skip
    memory = spec.resources.memory_gb
    if memory is not None and part.memory_mb and memory * 1024 > part.memory_mb:
        raise UsageError(f"{where['memory_gb']}: resources.memory_gb: {memory:g} per node, but "
                         f"the nodes of {name} have {part.memory_mb} MB")  # fmt: skip
    wanted, padded = time_minutes(spec), sbatch_minutes(spec)
    if padded is not None and part.max_time_min is not None and padded > part.max_time_min:
        raise UsageError(
            f"{where['max_duration']}: max_duration: {wanted} min + {MARGIN_MIN} min for "
            f"SLURM's time-limit warning = --time={padded}, over the MaxTime of {name} "
            f"({part.max_time_min} min)",
            "shorten max_duration or pick a partition that allows it",
        )
    if not cluster.account:
        raise UsageError(f"{cluster.where}: account: missing; sbatch needs --account on "
                         f"cluster {cluster.name}", "add `account: NAME` to the entry")  # fmt: skip
    allowed = part.allow_accounts
    if cluster.account in part.deny_accounts or (allowed and cluster.account not in allowed):
        raise UsageError(f"{cluster.where}: account: {cluster.account!r} may not use {name} "
                         f"(AllowAccounts={','.join(allowed or ('ALL',))})")  # fmt: skip
    if cluster.qos and part.allow_qos and cluster.qos not in part.allow_qos:
        raise UsageError(f"{cluster.where}: qos: {cluster.qos!r} is not allowed in {name} "
                         f"(AllowQos={','.join(part.allow_qos)})")  # fmt: skip
    plain = cluster.constraint and re.fullmatch(r"\w+", cluster.constraint)
    if plain and cluster.constraint not in part.features:
        raise UsageError(f"{cluster.where}: constraint: no node of {name} has the feature "
                         f"{cluster.constraint!r}")  # fmt: skip
    return part
