"""A real SLURM cluster in the lab: munged, slurmctld, two slurmd nodes and a login host.

Each SLURM machine is a lab host (infra.lab.hosts: its own network namespace on the lab
bridge, sshd, private /root and /tmp, its name as hostname and in its /etc/hosts), so the
daemons run where a real cluster's would and `lab down` finds their namespaces by name:
- `gjlab-slurmctld` runs slurmctld, `gjlab-slurm1`/`gjlab-slurm2` run slurmd (CPUs only),
  `gjlab-login` runs nothing but sshd: users submit from there over SSH (names with the
  lab's prefix, `gjlab-` for the default lab).
- munged runs once, in the machine's namespaces: its socket is a path under the lab folder,
  which every host sees (a unix socket is reached through the filesystem, not the network).
- The lab's slurm `etc` folder is bound over /etc/slurm inside each host's own mount
  namespace, so `sbatch`/`squeue`/`sinfo` in an SSH session find slurm.conf where they look
  by default; the machine's /etc is untouched (clients here use SLURM_CONF, see `client_env`).
- The daemons join the host's sshd's namespaces with `nsenter` (never `ip netns exec`, which
  remounts /sys: slurmd 22.05 loads its cgroup plugin even with proctrack/linuxproc and dies
  without /sys/fs/cgroup). With `-D` they stay in the foreground, so the pid recorded by
  `state.spawn` is the daemon's own.
Everything is recorded under `slurm` in the lab's state; `down` stops the daemons by pid,
then removes the hosts (which kills any job still running) and the folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.lab import network, state
from infra.lab.hosts import LabHost, create_host, destroy_host, host_name, list_hosts
from infra.lab.network import NETNS_DIR
from infra.lab.slurm_conf import CONTROLLER_PORT, PARTITIONS, SLURMD_PORT, Layout, render


def controller() -> str:
    return host_name("slurmctld")


def nodes() -> tuple[str, ...]:
    return (host_name("slurm1"), host_name("slurm2"))


def login() -> str:
    return host_name("login")


def host_names() -> tuple[str, ...]:
    """The cluster's hosts, named with the lab's prefix (`gjlab-slurm1`, ... by default)."""
    return (controller(), *nodes(), login())


TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol")
START_TIMEOUT = 60


@dataclass(frozen=True)
class SlurmCluster:
    """The running cluster as a client sees it."""

    login: LabHost
    controller: tuple[str, str]
    nodes: dict[str, str]
    shared: Path
    conf: Path
    partitions: dict[str, int]

    def client_env(self) -> dict[str, str]:
        """What a SLURM client on this machine (outside the hosts) needs to find the cluster."""
        return {"SLURM_CONF": str(self.conf)}


def layout() -> Layout:
    return Layout(state.lab_dir() / "slurm")


def missing_tools() -> list[str]:
    search = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    return [tool for tool in TOOLS if shutil.which(tool, path=search) is None]


def up() -> SlurmCluster:
    """Start what is not running; a second call changes nothing. Returns once both nodes
    are idle (sinfo), so a job submitted next starts within a scheduler tick."""
    absent = missing_tools()
    if absent:
        raise state.LabError(
            f"lab: SLURM needs {', '.join(absent)}", "run `bash infra/install-deps.sh`"
        )
    paths = layout()
    hosts = {name: create_host(name) for name in host_names()}
    _prepare_files(paths, hosts)
    with state.locked_state() as lab:
        rec = lab.setdefault("slurm", {})
        rec["hosts"] = list(host_names())
        rec["shared"] = str(paths.shared)
        rec["conf"] = str(paths.conf)
        for name in host_names():
            _bind_etc(lab["hosts"][name]["sshd"]["pid"], paths)
        # Each daemon is recorded before its readiness wait: one that is slow, not dead,
        # when the wait gives up still has its pid in the state for `down` (munged runs in
        # the machine's own namespaces, so no host's removal would end it).
        if not state.alive(rec.get("munged")):
            rec["munged"] = _spawn_munged(paths)
            _wait_for_munged(paths, rec["munged"])
        ctld_pid = lab["hosts"][controller()]["sshd"]["pid"]
        if not state.alive(rec.get("slurmctld")):
            rec["slurmctld"] = _spawn_slurmctld(paths, ctld_pid)
            _wait_for_slurmctld(paths, rec["slurmctld"], hosts[controller()].address)
        slurmds = rec.setdefault("slurmd", {})
        for node in nodes():
            if not state.alive(slurmds.get(node)):
                slurmds[node] = state.spawn(
                    slurmd_argv(node, lab["hosts"][node]["sshd"]["pid"], paths),
                    paths.log / f"{node}.stdout",
                )
        state.wait_until(
            lambda: _idle_nodes(paths) == set(nodes()) and all(
                _listening(slurmds[node]["pid"], SLURMD_PORT) for node in nodes()
            ),
            "SLURM nodes idle in sinfo and their slurmd listening",
            timeout=START_TIMEOUT, log=paths.log / "slurmctld.log",
        )  # fmt: skip
    found = cluster()
    if found is None:
        raise state.LabError("lab: the SLURM cluster went away while it started (lab down?)")
    return found


def down() -> None:
    """Stop the daemons by pid, remove the cluster's hosts and folder; nothing there is fine.
    The lab bridge goes too when nothing else of the lab uses it."""
    with state.locked_state() as lab:
        rec = lab.get("slurm", {})
        for slurmd in rec.get("slurmd", {}).values():
            state.stop(slurmd, timeout=10)
        state.stop(rec.get("slurmctld"), timeout=10)
        state.stop(rec.get("munged"), timeout=5)
        names = set(rec.get("hosts", [])) | set(host_names())
    for name in sorted(names):
        if name in state.read_state()["hosts"] or network.netns_exists(name):
            destroy_host(name)
    shutil.rmtree(layout().root, ignore_errors=True)
    with state.locked_state() as lab:
        lab.pop("slurm", None)
        unused = not lab["hosts"] and not any(state.alive(d) for d in lab["daemons"].values())
        if unused:
            network.remove_bridge()


def cluster() -> SlurmCluster | None:
    """The cluster if its daemons run, else None."""
    lab = state.read_state()
    rec = lab.get("slurm")
    if not rec or not state.alive(rec.get("slurmctld")):
        return None
    hosts = {h.name: h for h in list_hosts()}
    if not all(name in hosts for name in host_names()):
        return None
    return SlurmCluster(
        login=hosts[login()],
        controller=(controller(), hosts[controller()].address),
        nodes={node: hosts[node].address for node in nodes()},
        shared=Path(rec["shared"]),
        conf=Path(rec["conf"]),
        partitions=dict(PARTITIONS),
    )


def munged_argv(paths: Layout) -> list[str]:
    return [
        "munged", "--foreground", f"--key-file={paths.munge_key}",
        f"--socket={paths.munge_socket}", f"--pid-file={paths.munge_run / 'munged.pid'}",
        f"--log-file={paths.log / 'munged.log'}", f"--seed-file={paths.munge / 'munged.seed'}",
    ]  # fmt: skip


def _in_host(sshd_pid: int | str, name: str) -> list[str]:
    """Join a host's network, mount and UTS namespaces (those of its sshd)."""
    return [
        "nsenter", f"--net={NETNS_DIR / name}", f"--mount=/proc/{sshd_pid}/ns/mnt",
        f"--uts=/proc/{sshd_pid}/ns/uts", "--",
    ]  # fmt: skip


def slurmctld_argv(sshd_pid: int | str, paths: Layout) -> list[str]:
    return [*_in_host(sshd_pid, controller()), "slurmctld", "-D", "-i", "-f", str(paths.conf)]


def slurmd_argv(node: str, sshd_pid: int | str, paths: Layout) -> list[str]:
    return [*_in_host(sshd_pid, node), "slurmd", "-D", "-N", node, "-f", str(paths.conf)]


def dry_run_commands() -> list[list[str]]:
    """What `lab up --slurm --dry-run` prints: the hosts are made as any lab host."""
    paths = layout()
    return [
        ["mungekey", "--create", f"--keyfile={paths.munge_key}"],
        munged_argv(paths),
        ["mount", "--bind", str(paths.etc), "/etc/slurm", "<in the mount namespace of each host>"],
        slurmctld_argv("SSHD_PID", paths),
        *[slurmd_argv(node, "SSHD_PID", paths) for node in nodes()],
    ]


def down_commands() -> list[list[str]]:
    """What `lab down --dry-run` prints for the cluster."""
    rec = state.read_state().get("slurm", {})
    daemons = [*rec.get("slurmd", {}).values(), rec.get("slurmctld"), rec.get("munged")]
    kills = [["kill", str(d["pid"])] for d in daemons if d]
    hosts = [["ip", "netns", "del", name] for name in host_names()]
    return [*kills, *hosts, ["rm", "-rf", str(layout().root)]]


def _prepare_files(paths: Layout, hosts: dict[str, LabHost]) -> None:
    for folder in (paths.etc, paths.state, paths.log, paths.run, paths.munge_run):
        folder.mkdir(parents=True, exist_ok=True)
    for node in nodes():  # slurmd makes it, after complaining that it is not there
        (paths.spool / node).mkdir(parents=True, exist_ok=True)
    paths.shared.mkdir(mode=0o777, exist_ok=True)
    paths.shared.chmod(0o1777)
    paths.munge.mkdir(mode=0o700, exist_ok=True)
    paths.munge.chmod(0o700)
    if not paths.munge_key.exists():
        made = paths.munge / "munge.key.tmp"
        made.unlink(missing_ok=True)
        state.run(["mungekey", "--create", f"--keyfile={made}"])
        made.chmod(0o600)
        made.replace(paths.munge_key)
    text = render(
        paths,
        (controller(), hosts[controller()].address),
        [(node, hosts[node].address) for node in nodes()],
    )
    if not paths.conf.exists() or paths.conf.read_text() != text:
        tmp = paths.conf.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(paths.conf)


def _bind_etc(sshd_pid: int, paths: Layout) -> None:
    """/etc/slurm of the host is the lab's slurm etc (the mount lives and dies with the
    host's mount namespace, so a rebooted host gets it again here)."""
    seen = Path(f"/proc/{sshd_pid}/root/etc/slurm")
    try:  # device and inode: an inode number alone can match a folder of another filesystem
        bound = os.path.samefile(seen, paths.etc)
    except OSError:
        bound = False
    if not bound:
        state.run(["nsenter", f"--mount=/proc/{sshd_pid}/ns/mnt", "--",
                   "mount", "--bind", str(paths.etc), "/etc/slurm"])  # fmt: skip


def _spawn_munged(paths: Layout) -> dict[str, Any]:
    paths.munge_socket.unlink(missing_ok=True)
    return state.spawn(munged_argv(paths), paths.log / "munged.stdout")


def _wait_for_munged(paths: Layout, daemon: dict[str, Any]) -> None:
    state.wait_until(
        lambda: _munge_answers(paths), "munged", timeout=20, log=paths.log / "munged.log",
        daemon=daemon,
    )  # fmt: skip


def _munge_answers(paths: Layout) -> bool:
    if not paths.munge_socket.exists():
        return False
    made = subprocess.run(
        ["munge", "-n", "-S", str(paths.munge_socket)], capture_output=True, timeout=10
    )
    return made.returncode == 0


def _spawn_slurmctld(paths: Layout, sshd_pid: int) -> dict[str, Any]:
    return state.spawn(slurmctld_argv(sshd_pid, paths), paths.log / "slurmctld.stdout")


def _wait_for_slurmctld(paths: Layout, daemon: dict[str, Any], address: str) -> None:
    state.wait_until(
        lambda: _ping(paths), f"slurmctld on {address}:{CONTROLLER_PORT}",
        timeout=START_TIMEOUT, log=paths.log / "slurmctld.log", daemon=daemon,
    )  # fmt: skip


def _client(paths: Layout, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURM_CONF": str(paths.conf)}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)


def _ping(paths: Layout) -> bool:
    return "is UP" in _client(paths, "scontrol", "ping").stdout


def _listening(pid: int, port: int) -> bool:
    """A node a restarted slurmd has not come back on still shows idle in sinfo (the
    controller notices a dead slurmd only after SlurmdTimeout): a job sent there now fails.
    Read from the process's own network namespace: a test connection would fill slurmd's
    log with errors."""
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, _remote, status = row.split()[1:4]
            if local.endswith(f":{port:04X}") and status == "0A":  # 0A: LISTEN
                return True
    return False


def _idle_nodes(paths: Layout) -> set[str]:
    listed = _client(paths, "sinfo", "-h", "-N", "-p", next(iter(PARTITIONS)), "-o", "%N %t")
    return {line.split()[0] for line in listed.stdout.splitlines() if line.split()[1:] == ["idle"]}
