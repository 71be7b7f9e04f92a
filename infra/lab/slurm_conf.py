"""The lab SLURM cluster's configuration as text: slurm.conf for a controller, two CPU-only
compute nodes and a login host, every path under the lab folder (nothing in /etc).

Pure: the caller gives the addresses and folders and writes the text. The choices that
matter to a launcher under test are here and nowhere else:
- `EnforcePartLimits=ALL`: a request over a partition's MaxTime or size is refused by
  `sbatch` at once (by default it is accepted and pends for ever with `PartitionTimeLimit`).
- No `GresTypes`: the nodes have no GPUs, so `--gpus-per-node`/`--gres=gpu:N` are refused
  at submission, as on a CPU-only partition of a real site.
- `SlurmdParameters=config_overrides`: `CPUs=2`, `RealMemory` as written, whatever this
  machine has (a node whose hardware differs from its line would otherwise be drained).
- `proctrack/linuxproc`, `task/none`: no cgroup confinement (slurmd still needs
  /sys/fs/cgroup mounted, which is why nodes join namespaces with nsenter).
- `JobCompType=jobcomp/filetxt`: no slurmdbd, so plain `sacct` fails but `sacct -c` reads
  the finished jobs from this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CLUSTER = "gjlab"
CONTROLLER_PORT = 6817
SLURMD_PORT = 6818
NODE_CPUS = 2
NODE_MEMORY_MB = 2000
DEF_MEM_PER_CPU_MB = 500
PARTITIONS = {"debug": 60, "short": 2}
"""Partition name -> MaxTime in minutes; the first one is the default."""


@dataclass(frozen=True)
class Layout:
    """Where the cluster's daemons keep their files (all under `root`, the lab's slurm folder)."""

    root: Path

    @property
    def etc(self) -> Path:
        """Bound over /etc/slurm on every cluster host, so clients need no SLURM_CONF."""
        return self.root / "etc"

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge / "munge.key"

    @property
    def munge_run(self) -> Path:
        """munged refuses a socket folder that not everyone may enter (its key folder is 0700)."""
        return self.root / "munge-run"

    @property
    def munge_socket(self) -> Path:
        return self.munge_run / "munge.socket.2"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def shared(self) -> Path:
        """The job folder: the same path, the same files, on the login host and every node."""
        return self.root / "shared"

    @property
    def jobcomp(self) -> Path:
        return self.log / "jobcomp.txt"


CRED_EXPIRE_S = 10
"""A job step credential's life, and so a requeued job's wait before its next start."""


def render(layout: Layout, controller: tuple[str, str], nodes: list[tuple[str, str]]) -> str:
    """slurm.conf for `controller` (name, address) and `nodes` [(name, address), ...]."""
    name, address = controller
    lines = [
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={name}({address})",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={CONTROLLER_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "AuthType=auth/munge",
        # cred_expire: a requeued job waits that long before it may start again (SLURM's
        # default 120 s was most of each requeue test); the lab's steps start in seconds
        f"AuthInfo=socket={layout.munge_socket},cred_expire={CRED_EXPIRE_S}",
        "CredType=cred/munge",
        f"StateSaveLocation={layout.state}",
        f"SlurmdSpoolDir={layout.spool}/%n",
        f"SlurmctldPidFile={layout.run}/slurmctld.pid",
        f"SlurmdPidFile={layout.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={layout.log}/slurmctld.log",
        f"SlurmdLogFile={layout.log}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={layout.jobcomp}",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "MinJobAge=300",
        # a scancel's TERM, then SIGKILL after this: the node step's cancel of a job whose
        # agent died runs inside it, and at 5 s a loaded machine (two test runs) cut it short
        "KillWait=10",
        f"DefMemPerCPU={DEF_MEM_PER_CPU_MB}",
        "EnforcePartLimits=ALL",
    ]
    for node, node_address in nodes:
        lines.append(
            f"NodeName={node} NodeAddr={node_address} NodeHostname={node} CPUs={NODE_CPUS} "
            f"RealMemory={NODE_MEMORY_MB} State=UNKNOWN"
        )
    members = ",".join(node for node, _ in nodes)
    for i, (partition, minutes) in enumerate(PARTITIONS.items()):
        default = "YES" if i == 0 else "NO"
        lines.append(
            f"PartitionName={partition} Nodes={members} Default={default} "
            f"MaxTime={minutes} State=UP"
        )
    return "\n".join(lines) + "\n"
