"""The lab: a GPU cloud on this machine made of real parts, for tests and demos (needs root).

`up` makes the bridge, the registry, S3, the base image, static SSH hosts and (when
`infra.fakes` exists) the Lambda and Vast API fakes, forwarded to the bridge for the hosts
(forwards.py); `down` removes all of it by the records in the lab folder; `env_vars` says
how to reach it. Both take `dry_run`: the steps are values
(title, literal commands, action), printed by a dry run and carried out by a real one.
Which lab (bridge, subnet, host prefix, folder) comes from one setting, the lab's name
(`GPUJOB_LAB_NAME`, default `gjlab`: see naming), so labs of several names share a machine.
Modules: naming, state (records, lock, daemons), network (bridge, veths), boot (sshd and dockerd
in a host's namespaces), hosts (the public host API), registry, s3, base_image, job_image,
slurm (+ slurm_conf: a SLURM cluster on lab hosts, `up(slurm_cluster=True)`).
Standard library only at import time; boto3 and docker are imported where used.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from infra.lab import base_image, boot, forwards, naming, network, registry, s3, slurm, state
from infra.lab.hosts import (
    LabHost,
    create_host,
    destroy_host,
    host_name,
    kill_host_processes,
    known_hosts_path,
    lab_dir,
    list_hosts,
    user_key,
)

__all__ = [
    "LabHost", "create_host", "destroy_host", "down", "env_vars", "host_name",
    "kill_host_processes", "lab_dir", "list_hosts", "up", "user_key",
]  # fmt: skip

Report = Callable[[str], None]


def container_label() -> str:
    """What the lab's containers on the machine's dockerd carry: `down` removes those only."""
    return f"gpujob.lab={naming.name()}"


@dataclass(frozen=True)
class Step:
    """One thing `up` or `down` does: what a dry run prints is what a real run carries out."""

    title: str
    action: Callable[[], object]
    commands: list[list[str]] = field(default_factory=list)


def up(
    *, hosts: int = 2, slurm_cluster: bool = False, dry_run: bool = False, report: Report = print
) -> None:
    """Start whatever part of the lab is not running; a second call changes nothing."""
    if not dry_run:
        _require_root()
    net = naming.subnet()
    where = f"{net.network_address + 1}/{net.prefixlen}" if net else f"a /24 of {naming.LAB_RANGE}"
    steps = [
        Step(f"bridge {naming.bridge()} ({where}) and its FORWARD accept rule",
             network.ensure_bridge, network.bridge_argv()),
        Step("registry on the bridge, port 5000 (and a loopback forward for the machine's "
             "dockerd)", _start_registry,
             [registry.registry_argv(), registry.forward_argv()] if net else []),
        Step("S3 (moto) on loopback, forwarded to the bridge", _start_s3,
             [s3.server_argv("PORT"), *([s3.forward_argv("PORT")] if net else [])]),
        Step(f"base image {base_image.TAG}", lambda: base_image.build(report),
             [] if base_image.exists() else [base_image.debootstrap_argv(Path("ROOTFS"))]),
        Step(f"push {base_image.TAG} to the registry", lambda: base_image.publish(report)),
    ]  # fmt: skip
    for i in range(1, hosts + 1):
        name = host_name(f"h{i}")
        steps.append(Step(
            f"host {name} (sshd, dockerd)", lambda name=name: create_host(name, docker=True),
            [*network.host_argv(name, "ADDRESS"), boot.sshd_argv(name),
             *([boot.dockerd_argv(name, "SSHD_PID")] if net else [])],
        ))  # fmt: skip
    steps.append(Step("provider API fakes (infra.fakes), forwarded to the bridge for the hosts",
                      lambda: _start_fakes(report),
                      [forwards.forward_argv("PORT")] if net else []))  # fmt: skip
    if slurm_cluster:
        steps.append(Step(f"SLURM cluster (munged, {slurm.controller()}, "
                          f"{' '.join(slurm.nodes())}, login host {slurm.login()})",
                          slurm.up, slurm.dry_run_commands()))  # fmt: skip
    _carry_out(steps, dry_run, report)


def down(*, dry_run: bool = False, report: Report = print) -> None:
    """Remove every host, daemon, rule, link and container the lab made, by its records."""
    if not dry_run:
        _require_root()
    lab = state.read_state()
    names = sorted(set(lab["hosts"]) | set(network.lab_namespaces()))
    steps = [Step("provider API fakes and their forwards", lambda: _stop_fakes(report))]
    cluster_hosts = slurm.host_names()
    if "slurm" in lab or set(cluster_hosts) & set(names) or slurm.layout().root.exists():
        steps.append(Step("SLURM cluster: slurmd, slurmctld, munged, its hosts and folder",
                          slurm.down, slurm.down_commands()))  # fmt: skip
        names = [name for name in names if name not in cluster_hosts]
    steps += [
        Step(f"host {name}", lambda name=name: destroy_host(name),
             [["kill", "-KILL", "<every pid in netns " + name + ">"], ["ip", "netns", "del", name],
              ["ip", "link", "del", network.veth_name(name)]])
        for name in names
    ]  # fmt: skip
    steps += [
        Step(f"containers labelled {container_label()} on the machine's dockerd",
             _remove_containers,
             [["docker", "rm", "-f", f"<docker ps -aq --filter label={container_label()}>"]]),
        Step("S3 and registry daemons", _stop_daemons,
             [["kill", str(rec["pid"])] for rec in lab["daemons"].values()]),
        Step(f"bridge {naming.bridge()} and its FORWARD rule", network.remove_bridge,
             [["iptables", "-D", *network.forward_rule()], ["ip", "link", "del", naming.bridge()]]),
    ]  # fmt: skip
    _carry_out(steps, dry_run, report, keep_going=True)


def env_vars() -> dict[str, str]:
    """Variables that point gpujob and its tests at the running lab (parts not up are left out)."""
    lab = state.read_state()
    env = {
        naming.VARIABLE: naming.name(),
        "GPUJOB_LAB_DIR": str(lab_dir()),
        "GPUJOB_LAB_SSH_KEY": str(user_key()),
        "GPUJOB_LAB_KNOWN_HOSTS": str(known_hosts_path()),
        "GPUJOB_LAB_HOSTS": ",".join(f"{h.name}={h.address}" for h in list_hosts()),
    }
    if state.alive(lab["daemons"].get("registry")):
        env["GPUJOB_LAB_REGISTRY"] = registry.address()
        env["GPUJOB_LAB_REGISTRY_PUSH"] = registry.push_address()
        env["GPUJOB_LAB_BASE_IMAGE"] = f"{registry.address()}/{base_image.TAG}"
    if state.alive(lab["daemons"].get("s3")):
        env["GPUJOB_LAB_S3_ENDPOINT"] = s3.endpoint()
        env["GPUJOB_LAB_S3_HOST_ENDPOINT"] = s3.endpoint(for_hosts=True)
        env.update(s3.credentials())
    env.update(lab.get("fakes", {}))
    cluster = slurm.cluster()
    if cluster is not None:
        env["GPUJOB_LAB_SLURM_LOGIN"] = cluster.login.address
        env["GPUJOB_LAB_SLURM_SHARED"] = str(cluster.shared)
        env["GPUJOB_LAB_SLURM_CONF"] = str(cluster.conf)
    return env


def _carry_out(
    steps: list[Step], dry_run: bool, report: Report, *, keep_going: bool = False
) -> None:
    """Run the steps in order. `down` keeps going past a failed step, so one broken part
    never leaves the others running, and raises at the end with every failure."""
    failed = []
    for step in steps:
        if dry_run:
            report(f"would: {step.title}")
            for argv in step.commands:
                report(f"    {shlex.join(argv)}")
            continue
        report(step.title)
        try:
            step.action()
        except Exception as error:
            if not keep_going:
                raise
            report(f"FAILED: {step.title}: {error}")
            failed.append(f"{step.title}: {error}")
    if failed:
        raise state.LabError("lab down left work undone: " + "; ".join(failed))


def _require_root() -> None:
    import os

    if os.geteuid() != 0:
        raise state.LabError("the lab needs root", "run `sudo gpujob lab ...`")


def _start_registry() -> None:
    with state.locked_state() as lab:
        registry.start(lab["daemons"])


def _start_s3() -> None:
    with state.locked_state() as lab:
        s3.start(lab["daemons"])


def _stop_daemons() -> None:
    with state.locked_state() as lab:
        s3.stop(lab["daemons"])
        registry.stop(lab["daemons"])


def _remove_containers() -> None:
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={container_label()}"],
        capture_output=True, text=True,
    )  # fmt: skip
    ids = listed.stdout.split() if listed.returncode == 0 else []
    if ids:
        state.run(["docker", "rm", "-f", *ids])


def _fakes(report: Report) -> ModuleType | None:
    """`infra.fakes` is written by someone else and may not exist yet: then it is skipped."""
    try:
        import infra.fakes as fakes
    except ModuleNotFoundError as missing:
        if not (missing.name or "").startswith("infra.fakes"):
            raise
        report("provider fakes skipped: infra.fakes is not there")
        return None
    if not (hasattr(fakes, "start_fakes") and hasattr(fakes, "stop_fakes")):
        report("provider fakes skipped: infra.fakes has no start_fakes/stop_fakes yet")
        return None
    return fakes


def _start_fakes(report: Report) -> None:
    fakes = _fakes(report)
    if fakes is None:
        return
    urls = fakes.start_fakes(lab_dir())
    with state.locked_state() as lab:  # hosts that call the API (autostop) reach it there
        urls = {**urls, **forwards.start_all(lab["daemons"], urls)}
        lab["fakes"] = dict(urls)
    for key, url in urls.items():
        report(f"{key}={url}")


def _stop_fakes(report: Report) -> None:
    fakes = _fakes(report)
    if fakes is not None:
        fakes.stop_fakes(lab_dir())
    with state.locked_state() as lab:
        forwards.stop_all(lab["daemons"])
        lab.pop("fakes", None)
