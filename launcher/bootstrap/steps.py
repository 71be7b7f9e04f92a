"""The steps that make a host ready, each check -> fix -> verify over one Connection.

A step reads the host first and changes it only when the check fails, so a second `up` on a
ready host changes nothing and says so. A step that cannot be fixed from here stops the
bootstrap with what to do next. Nothing pretends: a host with no GPU is reported as having
none, and only `allow_cpu` lets the bootstrap go on past that.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from launcher.errors import UsageError
from launcher.remote.base import Connection

Status = Literal["ok", "fixed", "failed", "skipped"]
RCLONE_HOME_PATH = ".local/bin/rclone"
PULL_HINT = "check the image name and the registry login on the host"
INSTALL_RCLONE = "install it on the host: curl https://rclone.org/install.sh | sudo bash"
NVIDIA_RUNTIME = ("install nvidia-container-toolkit, then "
                  "`nvidia-ctk runtime configure --runtime=docker` and restart Docker")  # fmt: skip


@dataclass(frozen=True)
class HostProfile:
    """What the host must offer, from what `up` was asked for."""

    runtime: Literal["docker", "bare"] = "docker"
    allow_cpu: bool = False
    min_disk_gb: int = 0
    image: str | None = None


@dataclass(frozen=True)
class StepResult:
    step: str
    status: Status
    detail: str
    hint: str = ""


@dataclass
class HostFacts:
    """What the steps learn on the way; later steps and the caller read it."""

    home: str = "~"
    arch: str = ""
    python: str = ""
    gpus: list[str] = field(default_factory=list)
    driver: str | None = None
    docker: str | None = None
    rclone: str | None = None
    free_disk_gb: float | None = None
    shm_gb: float | None = None


Step = Callable[[Connection, HostProfile, HostFacts], StepResult]


def _sh(conn: Connection, script: str) -> Any:
    return conn.run(["sh", "-c", script])


def system(conn: Connection, profile: HostProfile, facts: HostFacts) -> StepResult:
    probe = (
        'echo "$HOME"; uname -m; id -un; '
        '(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -s; '
        'python3 -c "import sys; print(*sys.version_info[:2], sep=chr(46))" 2>/dev/null '
        "|| echo none"
    )
    result = _sh(conn, probe)
    lines = result.stdout.splitlines()
    if not result.ok or len(lines) < 5:
        why = f"cannot read the host (exit {result.exit_code}): {result.stderr.strip()[-200:]}"
        return StepResult("system", "failed", why, "check that the login shell works")
    facts.home, facts.arch, user, os_name, facts.python = (line.strip() for line in lines[:5])
    detail = f"{os_name}, {facts.arch}, user {user}, Python {facts.python}"
    if facts.python == "none":
        return StepResult("system", "failed", f"{detail}: no python3",
                          "install python3 on the host: gpujob's agent runs with it")  # fmt: skip
    return StepResult("system", "ok", detail)


def gpu(conn: Connection, profile: HostProfile, facts: HostFacts) -> StepResult:
    query = "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader"
    result = _sh(conn, f"command -v nvidia-smi >/dev/null 2>&1 || exit 127; {query}")
    rows = [line.split(",") for line in result.stdout.splitlines() if line.strip()]
    if result.ok and rows:
        facts.gpus = [row[0].strip() for row in rows]
        facts.driver = rows[0][-1].strip()
        return StepResult("gpu", "ok", f"{len(rows)}x {facts.gpus[0]}, driver {facts.driver}")
    why = (
        "no nvidia-smi"
        if result.exit_code == 127
        else (
            result.stderr.strip() or result.stdout.strip() or f"nvidia-smi exit {result.exit_code}"
        )
    )
    if profile.allow_cpu:
        return StepResult("gpu", "skipped", f"no NVIDIA GPU ({why}); going on: --allow-cpu")
    return StepResult("gpu", "failed", f"no NVIDIA GPU ({why})",
                      "use a GPU host, or pass --allow-cpu to use it without GPUs")  # fmt: skip


def docker(conn: Connection, profile: HostProfile, facts: HostFacts) -> StepResult:
    if profile.runtime == "bare":
        return StepResult("docker", "skipped", "bare runtime: jobs run in the host's own "
                          "environment (a Vast instance is itself a container)")  # fmt: skip
    result = conn.run(["docker", "version", "--format", "{{.Server.Version}}"])
    if not result.ok:
        return StepResult("docker", "failed", "Docker does not answer: "
                          f"{(result.stderr or result.stdout).strip()[-200:]}",
                          "install and start Docker (docs.docker.com/engine/install), "
                          "and let the login user use it")  # fmt: skip
    facts.docker = result.stdout.strip()
    if facts.gpus:
        runtimes = conn.run(["docker", "info", "--format", "{{json .Runtimes}}"])
        if "nvidia" not in runtimes.stdout:
            why = f"Docker {facts.docker} has no nvidia runtime"
            return StepResult("docker", "failed", why, NVIDIA_RUNTIME)
        return StepResult("docker", "ok", f"Docker {facts.docker}, nvidia runtime")
    return StepResult("docker", "ok", f"Docker {facts.docker}")


def disk(conn: Connection, profile: HostProfile, facts: HostFacts) -> StepResult:
    result = _sh(conn, 'df -P -k "$HOME" /dev/shm')
    rows = [line.split() for line in result.stdout.splitlines()[1:] if line.strip()]
    if not result.ok or len(rows) < 2:
        return StepResult("disk", "failed", f"cannot read free disk: {result.stderr.strip()}",
                          "check that `df` works on the host")  # fmt: skip
    facts.free_disk_gb = int(rows[0][3]) / 1e6
    facts.shm_gb = int(rows[1][1]) / 1e6
    detail = f"{facts.free_disk_gb:.1f} GB free in {facts.home}, /dev/shm {facts.shm_gb:.1f} GB"
    if facts.free_disk_gb < profile.min_disk_gb:
        return StepResult("disk", "failed", f"{detail}; {profile.min_disk_gb} GB asked",
                          "free disk on the host, or launch one with a larger --disk")  # fmt: skip
    return StepResult("disk", "ok", detail)


def _rclone_version(conn: Connection, facts: HostFacts) -> str | None:
    script = (f'for r in rclone "$HOME/{RCLONE_HOME_PATH}"; do '
              'v=$("$r" version 2>/dev/null | head -n 1); '
              '[ -n "$v" ] && echo "$v" && exit 0; done; exit 1')  # fmt: skip
    result = _sh(conn, script)
    return result.stdout.strip() if result.ok and result.stdout.strip() else None


def rclone(conn: Connection, profile: HostProfile, facts: HostFacts) -> StepResult:
    """Checkpoint transfers run on the host, so rclone must be there. A host with no way to
    the internet gets this machine's rclone (one static binary) when the architectures match."""
    facts.rclone = _rclone_version(conn, facts)
    if facts.rclone:
        return StepResult("rclone", "ok", facts.rclone)
    local = shutil.which("rclone")
    import platform

    if local is None or platform.machine() != facts.arch:
        return StepResult("rclone", "failed", "rclone is not installed", INSTALL_RCLONE)
    conn.put_file(str(Path(local).resolve()), f"{facts.home}/{RCLONE_HOME_PATH}", 0o755)
    facts.rclone = _rclone_version(conn, facts)
    if not facts.rclone:
        why = "the rclone copied to the host does not run"
        return StepResult("rclone", "failed", why, INSTALL_RCLONE)
    return StepResult("rclone", "fixed", f"{facts.rclone} in ~/{RCLONE_HOME_PATH}")


def image(conn: Connection, profile: HostProfile, facts: HostFacts) -> StepResult:
    if profile.image is None:
        return StepResult("image", "skipped", "no job image named (--image)")
    if profile.runtime == "bare":
        return StepResult("image", "skipped", f"bare runtime: the host runs {profile.image} itself")
    present = conn.run(["docker", "image", "inspect", "--format", "{{.Id}}", profile.image])
    status: Status = "ok"
    if not present.ok:
        pulled = conn.run(["docker", "pull", "-q", profile.image])
        if not pulled.ok:
            why = f"cannot pull {profile.image}: {pulled.stderr.strip()[-300:]}"
            return StepResult("image", "failed", why, PULL_HINT)
        status = "fixed"
    detail = f"{profile.image} {'pulled' if status == 'fixed' else 'present'}"
    if facts.driver:
        label = '{{index .Config.Labels "gpujob.image.torch"}}'
        torch = conn.run(["docker", "image", "inspect", "--format", label, profile.image])
        refusal = driver_refusal(profile.image, torch.stdout.strip(), facts.driver)
        if refusal is not None:
            return StepResult("image", "failed", refusal.message, refusal.hint or "")
    return StepResult("image", status, detail)


def driver_refusal(image: str, torch_label: str, driver: str) -> UsageError | None:
    """An image gpujob built says its torch (`2.14.1+cu130`): a CUDA build the host's
    driver cannot run is refused here, at `up`, rather than as a CUDA error at step 0."""
    variant = torch_label.partition("+")[2]
    if not variant.startswith("cu"):
        return None  # not built by gpujob, or a CPU build: nothing to compare
    from launcher.images.catalog import load_catalog
    from launcher.images.driver import check_driver

    try:
        check_driver(image, variant, driver, load_catalog())
    except UsageError as refused:
        return refused
    return None


STEPS: tuple[Step, ...] = (system, gpu, docker, disk, rclone, image)
