"""SLURM clusters: a login host reached over SSH, named in hosts.yaml as `type: slurm`:

    hosts:
      - {name: hpc, type: slurm, address: login.example.org, user: me, key: ~/.ssh/hpc,
         partition: gpu, account: proj42, qos: normal, constraint: a100,
         shared: /scratch/me, container: pyxis}

`shared` is a folder on the cluster's shared filesystem (the same path on the login host
and every node: job folders, workdirs and job environments live there); it defaults to the
login's home. `--on slurm:NAME[/PARTITION]` picks the entry (and overrides its partition).

What SLURM says about a queued job (`scontrol`, then `sacct -c` once the controller has
forgotten it) is read here too, and laid over what each node's agent recorded: before the
allocation there is no agent, and a node SLURM killed never recorded its end.
"""

from __future__ import annotations

import copy
import re
import shlex
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from launcher.errors import UsageError
from launcher.paths import hosts_file
from launcher.plan.slurm import STATE_WORDS, SlurmCluster, exit_code
from launcher.remote.base import Connection, Result, Sink
from launcher.remote.hosts import HostEntry, host_entry
from launcher.state.job_states import JobState
from launcher.targets.slurm.requeue import parse_requeue, superseded

if TYPE_CHECKING:
    from launcher.remote.batch import Op, Outcome

PROVIDER = "slurm"
FIELDS = ("name", "type", "address", "port", "user", "key", "partition", "account", "qos",
          "constraint", "shared", "container")  # fmt: skip
WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")
STATE_TTL_S = 0.5
CANCELLED_CODE = 143
"""A cancelled job's code (SIGTERM's, as an agent's cancel records) where SLURM says 0."""
"""One SLURM query serves every node's read in a poll round."""


def parse_clusters(text: str, where: str) -> dict[str, tuple[SlurmCluster, HostEntry]]:
    """hosts.yaml's `type: slurm` entries by name (the other entries are ssh.py's)."""
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"{where}: not YAML: {err}".splitlines()[0]) from None
    entries = data.get("hosts") if isinstance(data, dict) else None
    found: dict[str, tuple[SlurmCluster, HostEntry]] = {}
    names: set[str] = set()
    for index, raw in enumerate(entries if isinstance(entries, list) else []):
        at = f"{where}: hosts[{index}]"
        name = raw.get("name") if isinstance(raw, dict) else None
        if isinstance(name, str):  # names are unique across all entries, ssh's and slurm's
            if name in names:
                raise UsageError(f"{at}: the name {name!r} is used twice")
            names.add(name)
        if not isinstance(raw, dict) or raw.get("type") != PROVIDER:
            continue
        login = host_entry(raw, at, FIELDS, f"a slurm entry has {', '.join(FIELDS)}")
        words = {k: str(raw[k]) for k in FIELDS[6:] if raw.get(k) is not None}
        cluster = SlurmCluster(
            name=raw["name"], login=raw["name"], shared=words.get("shared", ""),
            account=words.get("account"), partition=words.get("partition"),
            qos=words.get("qos"), constraint=words.get("constraint"),
            container=words.get("container"), where=f"{at} ({raw['name']})",
        )  # fmt: skip
        found[raw["name"]] = (cluster, login)
    return found


def resolve_cluster(on: tuple[str, ...] | list[str]) -> tuple[SlurmCluster, HostEntry]:
    """`--on slurm:NAME[/PARTITION]`: the hosts.yaml entry, its partition overridden."""
    from dataclasses import replace

    if len(on) != 1:
        raise UsageError("--on slurm:NAME takes the whole job: give it alone",
                         "the cluster chooses the nodes")  # fmt: skip
    name, _, partition = on[0].removeprefix("slurm:").partition("/")
    path = hosts_file()
    clusters = parse_clusters(path.read_text(), str(path)) if path.is_file() else {}
    if name not in clusters:
        raise UsageError(
            f"--on slurm:{name}: no `type: slurm` entry named {name!r} in {path}",
            "add {name, type: slurm, address, user, account, partition, shared} to hosts.yaml",
        )
    cluster, login = clusters[name]
    if partition:  # refusals of the partition name --on; the other fields, the entry
        cluster = replace(cluster, partition=partition,
                          partition_where=f"--on slurm:{name}/{partition}")  # fmt: skip
    return cluster, login


@dataclass
class SlurmJobView:
    """What SLURM says about one job, asked on the login host at most every STATE_TTL_S."""

    login: Connection
    job_id: str
    out_file: str = ""
    state: str = ""
    reason: str = ""
    code: int | None = None
    nodes: str = ""
    restarts: int = 0
    """SLURM's requeues of the job so far (`Restarts=`; requeue.py)."""
    requeue: bool = False
    asked_at: float = field(default=-1e9)
    tail: list[str] = field(default_factory=list)
    """The last lines of slurm-<id>.out (`out_file`) once SLURM says the job ended: what
    failed before any agent ran (no NodeAddr, a node-count mismatch, srun's errors)."""

    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def refresh(self) -> None:
        if time.monotonic() - self.asked_at < STATE_TTL_S:
            return
        self.asked_at = time.monotonic()
        result = self.login.run(["sh", "-c", STATE_SCRIPT, "sh", self.job_id, self.out_file])
        text, _, tail = result.stdout.partition(TAIL_MARK)
        state, reason, code, nodes = parse_state(text)
        restarts, requeue = parse_requeue(text)
        with self.lock:
            self.state, self.reason, self.code, self.nodes = state, reason, code, nodes
            self.restarts, self.requeue = restarts, requeue
            if state in STATE_WORDS:
                self.tail = [line for line in tail.splitlines() if line.strip()]

    def snapshot(self) -> SlurmJobView:
        """SLURM's word as of now, kept apart from later refreshes (another node's stream
        refreshes the same view from its own thread)."""
        with self.lock:
            view = copy.copy(self)
            view.tail = list(self.tail)
            return view


TAIL_MARK = "@@gpujob-tail@@\n"
STATE_SCRIPT = """\
scontrol -o show job "$1" 2>/dev/null ||
sacct -c -n -P -j "$1" --format=JobID,State,ExitCode,NodeList 2>/dev/null | sed 's/^/sacct|/'
if [ -n "$2" ] && [ -f "$2" ]; then echo @@gpujob-tail@@; tail -n 8 "$2"; fi
exit 0
"""


def parse_state(text: str) -> tuple[str, str, int | None, str]:
    """(state, reason, exit code, nodes) from `scontrol -o show job` or `sacct -c -P`."""
    for line in text.splitlines():
        if line.startswith("sacct|"):
            parts = line.split("|")[1:]
            if len(parts) >= 4 and "." not in parts[0]:
                state = parts[1].split()[0] if parts[1] else ""
                return state, "", exit_code(parts[2]), parts[3]
            continue
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobState" in fields:
            return (fields["JobState"], fields.get("Reason", ""),
                    exit_code(fields.get("ExitCode", "")), fields.get("NodeList", ""))  # fmt: skip
    return "", "", None, ""


def node_status(agent: dict[str, Any], view: SlurmJobView) -> dict[str, Any]:
    """The node's status: its agent's where it recorded one that SLURM does not contradict;
    SLURM's while the job waits, and where the node ended without recording it."""
    state = agent.get("state")
    if state in STATE_WORDS.values() or state == JobState.LOST:
        if not superseded(agent, view):
            return agent
        agent, state = {}, None  # the last attempt's end: SLURM's word until the next starts
    slurm = view.state
    shown = {**agent, "slurm_state": slurm, "slurm_reason": view.reason}
    started = (JobState.STARTING, JobState.RUNNING)
    if slurm in WAITING and state not in started:  # (the view may be stale)
        return {**shown, "state": JobState.PENDING, "reason": f"SLURM {slurm} ({view.reason})"}
    ended = STATE_WORDS.get(slurm)
    if ended is None:
        return shown if state in started else {**shown, "state": JobState.STARTING}
    if ended == JobState.TIMED_OUT:
        reason = "timed out: SLURM's time limit (--time) ended it before the agent recorded it"
        return {**shown, "state": ended, "exit_code": 124, "reason": reason}
    code = view.code if view.code is not None else (0 if ended == JobState.SUCCEEDED else 1)
    if ended == JobState.CANCELLED and not view.code:  # SLURM's 0:0 for a job cancelled PENDING
        code = CANCELLED_CODE
    reason = f"SLURM {slurm}" + (f" ({view.reason})" if view.reason not in ("", "None") else "")
    if view.tail and ended != JobState.SUCCEEDED:  # no agent recorded an end: SLURM's own output
        reason += f"; {view.out_file.rsplit('/', 1)[-1]} ends: {view.tail[-1].strip()}"
    return {**shown, "state": ended, "exit_code": code, "reason": reason}


class SlurmNode:
    """One node's log and status through the login host (a Connection for `logs`): the log
    by byte offset as the agent serves it from the shared filesystem, the status laid over
    SLURM's view of the job. `note` hears when the job waits in the queue, and why."""

    def __init__(self, login: Connection, view: SlurmJobView, rank: int, note: Any = None):
        self.login, self.view, self.rank, self.note = login, view, rank, note
        self.host = login.host
        self._said = ""

    def read_log(
        self, node_dir: str, offset: int, wait_s: float = 0.0, sink: Sink | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        self.view.refresh()
        # SLURM's word from before the agent's status is taken: a newer one (another node's
        # refresh while this read waits) can say the job ended after this status was read,
        # and would hide the node's own recorded end (its exit code, that it failed first).
        view = self.view.snapshot()
        # Also while the job waits: the agent's read holds until the log has bytes (a long
        # poll on the login host), so the first line shows as soon as the node writes it.
        data, agent = self.login.read_log(node_dir, offset, wait_s, sink)
        status = node_status(agent, view)
        self._tell(status)
        return data, status

    def _tell(self, status: dict[str, Any]) -> None:
        if self.note is None or self.rank != 0:
            return
        said = ""
        if status.get("state") == "pending":
            said = (f"SLURM job {self.view.job_id} is PENDING ({self.view.reason}); its log "
                    "streams once it starts")  # fmt: skip
        elif self._said and self.view.state == "RUNNING":
            said = f"SLURM job {self.view.job_id} is RUNNING on {self.view.nodes}"
        elif (
            self.view.tail
            and status.get("slurm_state")
            and status.get("state") in ("failed", "cancelled", "timed out")
        ):  # ended with no agent's record: show what SLURM's output file says
            name = self.view.out_file.rsplit("/", 1)[-1]
            said = f"no agent recorded the end; {name} ends:\n" + "\n".join(
                f"  {line}" for line in self.view.tail)  # fmt: skip
        if said and said != self._said:
            self.note(said)
            self._said = said

    def run(
        self, argv: tuple[str, ...] | list[str], *, stream: bool = False, input: bytes | None = None
    ) -> Result:
        return self.login.run(argv, stream=stream, input=input)

    def put(self, path: str, content: bytes, mode: int) -> None:
        self.login.put(path, content, mode)

    def put_file(self, source: str, path: str, mode: int) -> None:
        self.login.put_file(source, path, mode)

    def batch(self, ops: list[Op]) -> Outcome:
        return self.login.batch(ops)

    def close(self) -> None:
        self.login.close()


def scancel_argv(job_id: str) -> list[str]:
    return ["scancel", job_id]


def describe_argv() -> list[str]:
    """One exec for everything the checks before queueing read: partitions as sinfo and
    scontrol describe them, and the login's python3 version."""
    from launcher.plan.slurm_checks import PARTITIONS_ARGV, SINFO_ARGV

    script = (f"{shlex.join(SINFO_ARGV)} || exit 3; echo @@; {shlex.join(PARTITIONS_ARGV)}"
              " || exit 3; echo @@; python3 -c 'import sys; print(*sys.version_info[:2], "
              "sep=\".\")'; echo \"$HOME\"")  # fmt: skip
    return ["sh", "-c", script]
