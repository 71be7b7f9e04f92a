"""The steps that make a host ready, each check -> fix -> verify over one Connection.

A step reads the host first and changes it only when the check fails, so a second `up` on a
ready host changes nothing and says so. A step that cannot be fixed from here stops the
bootstrap with what to do next. Nothing pretends: a host with no GPU is reported as having
none, and only `allow_cpu` lets the bootstrap go on past that.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from launcher.errors import GpujobError, UsageError
from launcher.plan.env_build import UV_HOME_PATH
from launcher.plan.model import HostFacts
from launcher.remote.base import Connection
from launcher.remote.facts import host_facts

if TYPE_CHECKING:
    from launcher.bootstrap.autostop import AutostopSetup

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
    autostop: AutostopSetup | None = None
    """A rented host's watcher that ends it once idle (`up --autostop`), else None."""


class StepResult(NamedTuple):
    """One step's verdict as the user reads it; `hint` is what to do when it failed."""

    step: str
    status: Status
    detail: str
    hint: str = ""


@dataclass
class Findings:
    """What the steps learn on the way; later steps and the caller read it. The host's own
    facts come from the one probe every command uses (`launcher.remote.facts`)."""

    host: HostFacts | None = None
    docker: str | None = None
    rclone: str | None = None

    @property
    def facts(self) -> HostFacts:
        assert self.host is not None, "the system step runs first"
        return self.host

    def as_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        facts = asdict(self.host) if self.host else {}
        facts["images"] = sorted(facts.get("images", ()))
        return {**facts, "docker": self.docker, "rclone": self.rclone}


Step = Callable[[Connection, HostProfile, Findings], StepResult]


def _sh(conn: Connection, script: str) -> Any:
    return conn.run(["sh", "-c", script])


def system(conn: Connection, profile: HostProfile, found: Findings) -> StepResult:
    try:
        facts = found.host = host_facts(conn, require_python=False)
    except GpujobError as err:
        return StepResult("system", "failed", err.message, "check that the login shell works")
    version = facts.version or "none"
    detail = f"{facts.os_name}, {facts.arch}, user {facts.user}, Python {version}"
    if not facts.version:
        return StepResult("system", "failed", f"{detail}: no python3",
                          "install python3 on the host: gpujob's agent runs with it")  # fmt: skip
    if profile.runtime == "docker":  # jobs run in the image's own environment: a venv
        # made here (2 to 3 s of ensurepip on the host's boot, a replacement's included)
        # would be made only to be thrown away; its failure here never refused the host
        return StepResult("system", "ok", f"{detail} (jobs run in the image's environment)")
    made = _make_venv(conn)
    if made.ok:
        return StepResult("system", "ok", f"{detail}, venv ok")
    fixed = conn.run(["sh", "-c", INSTALL_VENV.replace("VERSION", facts.version)])
    if fixed.ok and _make_venv(conn).ok:
        return StepResult("system", "fixed", f"{detail}, python{facts.version}-venv installed")
    return StepResult("system", "failed", f"{detail}: cannot make a venv ({_last(made)})",
                      f"install python{facts.version}-venv (Debian/Ubuntu) on the host: job "
                      "environments are venvs")  # fmt: skip


MAKE_VENV = 'd=$(mktemp -d) && python3 -m venv "$d/v"; code=$?; rm -rf "$d"; exit $code'
"""A venv with pip, as the job environment is made: Debian's python3 without python3-venv
fails here ("ensurepip is not available"), and a job would fail later with only a banner."""
INSTALL_VENV = (
    "export DEBIAN_FRONTEND=noninteractive; command -v apt-get >/dev/null || exit 127; "
    'if [ "$(id -u)" = 0 ]; then s=; else s="sudo -n"; fi; '
    "$s apt-get install -y -qq pythonVERSION-venv >/dev/null 2>&1 || "
    "{ $s apt-get update -qq >/dev/null 2>&1 && $s apt-get install -y -qq pythonVERSION-venv; }"
)


def _make_venv(conn: Connection) -> Any:
    return _sh(conn, MAKE_VENV)


def _last(result: Any) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1][-200:] if lines else f"exit {result.exit_code}"


def gpu(conn: Connection, profile: HostProfile, found: Findings) -> StepResult:
    facts = found.facts
    if facts.gpu_names:
        names = facts.gpu_names
        return StepResult("gpu", "ok", f"{len(names)}x {names[0]}, driver {facts.driver}")
    why = "nvidia-smi lists none"
    if profile.allow_cpu:
        return StepResult("gpu", "skipped", f"no NVIDIA GPU ({why}); going on: --allow-cpu")
    return StepResult("gpu", "failed", f"no NVIDIA GPU ({why})",
                      "use a GPU host, or pass --allow-cpu to use it without GPUs")  # fmt: skip


def docker(conn: Connection, profile: HostProfile, found: Findings) -> StepResult:
    if profile.runtime == "bare":
        return StepResult("docker", "skipped", "bare runtime: jobs run in the host's own "
                          "environment (a Vast instance is itself a container)")  # fmt: skip
    result = conn.run(["docker", "version", "--format", "{{.Server.Version}}"])
    if not result.ok:
        return StepResult("docker", "failed", "Docker does not answer: "
                          f"{(result.stderr or result.stdout).strip()[-200:]}",
                          "install and start Docker (docs.docker.com/engine/install), "
                          "and let the login user use it")  # fmt: skip
    found.docker = result.stdout.strip()
    if found.facts.gpus:
        runtimes = conn.run(["docker", "info", "--format", "{{json .Runtimes}}"])
        if "nvidia" not in runtimes.stdout:
            why = f"Docker {found.docker} has no nvidia runtime"
            return StepResult("docker", "failed", why, NVIDIA_RUNTIME)
        return StepResult("docker", "ok", f"Docker {found.docker}, nvidia runtime")
    return StepResult("docker", "ok", f"Docker {found.docker}")


def disk(conn: Connection, profile: HostProfile, found: Findings) -> StepResult:
    facts = found.facts
    if facts.free_bytes is None or facts.shm_bytes is None:
        return StepResult("disk", "failed", "cannot read free disk and /dev/shm",
                          "check that `df` works on the host")  # fmt: skip
    free_gb = facts.free_bytes / 1e9
    detail = f"{free_gb:.1f} GB free in {facts.free_at}, /dev/shm {facts.shm_bytes / 1e9:.1f} GB"
    if free_gb < profile.min_disk_gb:
        return StepResult("disk", "failed", f"{detail}; {profile.min_disk_gb} GB asked",
                          "free disk on the host, or launch one with a larger --disk")  # fmt: skip
    return StepResult("disk", "ok", detail)


def _version_of(conn: Connection, tool: str, home_path: str, flag: str) -> str | None:
    """`TOOL FLAG` (its version) from the PATH or from where gpujob puts a copy, first line."""
    script = (f'for r in {tool} "$HOME/{home_path}"; do '
              f'v=$("$r" {flag} 2>/dev/null | head -n 1); '
              '[ -n "$v" ] && echo "$v" && exit 0; done; exit 1')  # fmt: skip
    result = _sh(conn, script)
    return result.stdout.strip() if result.ok and result.stdout.strip() else None


def _copy_ours(conn: Connection, facts: HostFacts, local: str | None, home_path: str) -> bool:
    """This machine's binary of a tool to `~/home_path` on the host, where the architectures
    match; False where there is nothing to copy."""
    import platform

    if local is None or platform.machine() != facts.arch:
        return False
    conn.put_file(str(Path(local).resolve()), f"{facts.home}/{home_path}", 0o755)
    return True


def rclone(conn: Connection, profile: HostProfile, found: Findings) -> StepResult:
    """Checkpoint transfers run on the host, so rclone must be there. A host with no way to
    the internet gets this machine's rclone (one static binary) when the architectures match."""
    found.rclone = _version_of(conn, "rclone", RCLONE_HOME_PATH, "version")
    if found.rclone:
        return StepResult("rclone", "ok", found.rclone)
    if not _copy_ours(conn, found.facts, shutil.which("rclone"), RCLONE_HOME_PATH):
        return StepResult("rclone", "failed", "rclone is not installed", INSTALL_RCLONE)
    found.rclone = _version_of(conn, "rclone", RCLONE_HOME_PATH, "version")
    if not found.rclone:
        why = "the rclone copied to the host does not run"
        return StepResult("rclone", "failed", why, INSTALL_RCLONE)
    return StepResult("rclone", "fixed", f"{found.rclone} in ~/{RCLONE_HOME_PATH}")


def uv(conn: Connection, profile: HostProfile, found: Findings) -> StepResult:
    """Bare jobs make their environment with uv where the host has it (many times faster
    than pip); a host without uv gets this machine's, as with rclone. Never fatal: the
    environment script falls back to pip and says so."""
    if profile.runtime == "docker":
        return StepResult("uv", "skipped", "jobs run in the image's own environment (a "
                          "--runtime bare job here makes its own with uv only if the host "
                          "has it, else with pip)")  # fmt: skip
    have = _version_of(conn, "uv", UV_HOME_PATH, "--version")
    if have:
        return StepResult("uv", "ok", have)
    if _copy_ours(conn, found.facts, local_uv(), UV_HOME_PATH):
        have = _version_of(conn, "uv", UV_HOME_PATH, "--version")
        if have:
            return StepResult("uv", "fixed", f"{have} in ~/{UV_HOME_PATH}")
    return StepResult("uv", "skipped", "no uv here and none to copy: job environments are "
                      "made with pip (slower); `pip install uv` there makes them fast")  # fmt: skip


def local_uv() -> str | None:
    """The uv of gpujob's own environment (a dependency), else the one on PATH."""
    import sys

    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.is_file() else shutil.which("uv")


def image(conn: Connection, profile: HostProfile, found: Findings) -> StepResult:
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
    driver = found.facts.driver
    if driver:
        label = '{{index .Config.Labels "gpujob.image.torch"}}'
        torch = conn.run(["docker", "image", "inspect", "--format", label, profile.image])
        refusal = driver_refusal(profile.image, torch.stdout.strip(), driver)
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


def autostop(conn: Connection, profile: HostProfile, found: Findings) -> StepResult:
    """Last, once the host is otherwise ready: the watcher starts counting idle time."""
    if profile.autostop is None:
        return StepResult("autostop", "skipped", "not asked (--autostop)")
    from launcher.bootstrap.autostop import ensure

    return ensure(conn, profile.autostop, found.facts.home)


STEPS: tuple[Step, ...] = (system, gpu, docker, disk, rclone, uv, image, autostop)
