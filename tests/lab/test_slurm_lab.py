"""The lab's SLURM cluster, used as a user of a real cluster would: over SSH to the login host.

The up/down cycle runs first among the SLURM tests (see conftest), before the session
cluster of `slurm_cluster` exists, because it removes the one cluster of the machine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from labtools import GPUJOB, lab_is_up, wait_until
from slurmlab import login_ssh, read_when_done, slurm_missing

from infra.lab.hosts import host_name

pytestmark = pytest.mark.lab

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd")
NAMESPACES = ("mnt", "net", "uts")


def daemon_records() -> list[dict]:
    from infra.lab import state

    rec = state.read_state().get("slurm", {})
    return [rec["munged"], rec["slurmctld"], *rec["slurmd"].values()]


def host_namespaces() -> dict[str, str]:
    """The namespaces of each cluster host as /proc names them (`mnt:[4026532301]`), to the
    host's name: those of its sshd, which its daemons and their jobs join with nsenter."""
    from infra.lab import slurm, state

    hosts = state.read_state()["hosts"]
    return {
        os.readlink(f"/proc/{hosts[name]['sshd']['pid']}/ns/{kind}"): name
        for name in slurm.host_names()
        for kind in NAMESPACES
    }


def now_in_ticks() -> int:
    """The kernel's clock for process start times (ticks since boot), read now."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return int(uptime * os.sysconf("SC_CLK_TCK"))


def in_host_namespaces(namespaces: dict[str, str], settled: int) -> list[str]:
    """Processes still in a cluster host's namespaces. The /etc/slurm binds live only in the
    hosts' mount namespaces, which the kernel frees with every mount in them once no process
    is left there (the network namespaces' /run/netns pins are checked by name apart). Only
    processes that started by `settled` (ticks, taken before the down) count: a namespace
    made once the hosts went may reuse a freed number (another session's container, made
    between the down and this look), but none of its processes is ours."""
    from infra.lab import state

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = [os.readlink(f"/proc/{pid}/ns/{kind}") for kind in NAMESPACES]
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        hosts = sorted({namespaces[link] for link in links if link in namespaces})
        started = state.start_time(int(pid))
        if hosts and started is not None and started <= settled:
            found.append(f"process {pid} {comm} in the namespaces of {', '.join(hosts)}")
    return found


def leftovers(records: list[dict], namespaces: dict[str, str], settled: int) -> list[str]:
    """Everything of the cluster still on the machine, in words (empty when clean);
    `settled`: the kernel's clock before the down (in_host_namespaces)."""
    from infra.lab import naming, network, slurm, state

    found = [f"pid {r['pid']} {' '.join(r['argv'][-4:])}" for r in records if state.alive(r)]
    found += [f"netns {name}" for name in slurm.host_names() if network.netns_exists(name)]
    found += in_host_namespaces(namespaces, settled)
    ours = f"{state.lab_dir()}/"  # every daemon of this lab's cluster names a file in it
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if comm in DAEMONS and ours in argv and state.start_time(int(pid)) is not None:
            found.append(f"process {pid} {comm}")
    # The machine's own mounts: a bind over /etc/slurm belongs in the hosts' namespaces only.
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    found += [f"mount {line.split()[4]}" for line in mounts if "/slurm" in line.split()[4]]
    if slurm.layout().root.exists():
        found.append(f"folder {slurm.layout().root}")
    if not lab_is_up():
        rule = ["iptables", "-C", *network.forward_rule()]
        if subprocess.run(rule, capture_output=True).returncode == 0:
            found.append("iptables FORWARD rule for the lab bridge")
        if network.link_exists(naming.bridge()):
            found.append(f"bridge {naming.bridge()}")
    return found


def test_cluster_up_twice_then_lab_down_leaves_nothing_behind(lab_of_its_own: str) -> None:
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    from infra.lab import slurm, state

    records: list[dict] = []
    namespaces: dict[str, str] = {}
    try:
        first = slurm.up()
        records += daemon_records()
        namespaces = host_namespaces()
        assert len(namespaces) == len(NAMESPACES) * len(slurm.host_names())  # none shared
        again = slurm.up()
        assert again == first
        assert daemon_records() == records  # the same daemons, by pid and start time
        listed = login_ssh(first, "sinfo -h -N -p debug -o '%N %t'")
        assert listed.returncode == 0, listed.stderr
        assert sorted(listed.stdout.splitlines()) == [f"{node} idle" for node in slurm.nodes()]
        pid_file = first.shared / "running.pid"
        running = login_ssh(first, f"sbatch --chdir={first.shared} "
                                   f"--wrap 'echo $$ > {pid_file}; exec sleep 300'")  # fmt: skip
        assert running.returncode == 0, running.stderr
        job_pid = int(read_when_done(pid_file, 1))
        assert state.start_time(job_pid) is not None
        records.append({"pid": job_pid, "start": state.start_time(job_pid), "argv": ["job"]})
    finally:
        settled = now_in_ticks()
        if lab_is_up():  # the rest of the lab was up before: only the cluster goes
            slurm.down()
            down = None
        else:
            down = subprocess.run([GPUJOB, "lab", "down"], capture_output=True, text=True,
                                  timeout=300)  # fmt: skip
    if down is not None:
        assert down.returncode == 0, down.stderr
        assert "lab: SLURM cluster" in down.stderr
    assert leftovers(records, namespaces, settled) == []


def test_sinfo_on_the_login_host_shows_two_idle_nodes(slurm_cluster) -> None:
    """Idle once an earlier test's job has left the nodes (SLURM frees them a moment after a
    job ends: `mix`/`comp` until then)."""

    def listing() -> list[str]:
        listed = login_ssh(slurm_cluster, "sinfo -h -o '%P %a %l %D %t %N'")
        assert listed.returncode == 0, listed.stderr
        return listed.stdout.splitlines()

    wait_until(lambda: all(" idle " in line for line in listing()), "both nodes idle")
    prefix = host_name("")  # gjlab- in the default lab
    assert listing() == [
        f"debug* up 1:00:00 2 idle {prefix}slurm[1-2]",
        f"short up 2:00 2 idle {prefix}slurm[1-2]",
    ]


def test_two_node_batch_job_writes_both_node_names_to_the_shared_folder(slurm_cluster) -> None:
    folder = slurm_cluster.shared / "test-two-nodes"
    folder.mkdir(exist_ok=True)
    submit = (
        f"cd {folder} && sbatch --parsable --nodes=2 --ntasks-per-node=1 --wrap 'srun hostname'"
    )
    done = login_ssh(slurm_cluster, submit)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    assert job.isdigit(), done.stdout
    out = read_when_done(folder / f"slurm-{job}.out", 2)
    assert sorted(out.split()) == [host_name("slurm1"), host_name("slurm2")]
    state = f"scontrol -o show job {job} | grep -o 'JobState=[A-Z]*'"
    from labtools import wait_until

    wait_until(
        lambda: "COMPLETED" in login_ssh(slurm_cluster, state).stdout, f"job {job} done", every=0.5
    )
    history = login_ssh(slurm_cluster, f"sacct -c -n -j {job} -o JobID,State")
    assert history.returncode == 0, history.stderr
    assert history.stdout.split() == [job, "COMPLETED"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ("--gpus-per-node=1", "Invalid generic resource (gres) specification"),
        ("--partition=short --time=3", "Requested time limit is invalid"),
        ("--nodes=3", "Node count specification invalid"),
    ],
)
def test_requests_the_cluster_cannot_meet_are_refused_at_submission(
    slurm_cluster, args: str, says: str
) -> None:
    done = login_ssh(slurm_cluster, f"cd {slurm_cluster.shared} && sbatch {args} --wrap true")
    assert done.returncode == 1
    assert says in done.stderr


def test_dry_run_of_lab_up_with_slurm_prints_the_daemons_and_starts_nothing() -> None:
    from infra.lab import network, slurm

    before = set(network.lab_namespaces())
    done = subprocess.run([GPUJOB, "lab", "up", "--slurm", "--hosts", "0", "--dry-run"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "would: SLURM cluster" in done.stderr
    assert f"slurmd -D -N {host_name('slurm2')} -f {slurm.layout().conf}" in done.stderr
    assert set(network.lab_namespaces()) == before
