"""Bootstrap's uv step on a real (local) host with a HOME of its own: a bare host without uv
gets this machine's uv in ~/.local/bin, where the job environment script looks; a second
bootstrap finds it; a Docker host is left alone."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from launcher.bootstrap.steps import Findings, HostProfile, local_uv, uv
from launcher.plan.env_build import UV_HOME_PATH
from launcher.plan.model import HostFacts
from launcher.remote.local import LocalConnection


@pytest.fixture
def bare_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Findings:
    """A host whose PATH has no uv and whose HOME is empty."""
    path = [p for p in os.environ["PATH"].split(":") if not (Path(p) / "uv").exists()]
    monkeypatch.setenv("PATH", ":".join(path))
    monkeypatch.setenv("HOME", str(tmp_path))
    facts = HostFacts(home=str(tmp_path), python="python3", version="3.11", docker=False,
                      gpus=0, arch=platform.machine())  # fmt: skip
    return Findings(host=facts)


def test_a_bare_host_without_uv_gets_ours_then_keeps_it(bare_home: Findings) -> None:
    assert local_uv() is not None, "uv is one of gpujob's dependencies"
    first = uv(LocalConnection(), HostProfile(runtime="bare"), bare_home)
    assert first.status == "fixed", first
    assert first.detail.startswith("uv ") and f"~/{UV_HOME_PATH}" in first.detail
    copied = Path(bare_home.facts.home) / UV_HOME_PATH
    assert copied.is_file() and os.access(copied, os.X_OK)
    again = uv(LocalConnection(), HostProfile(runtime="bare"), bare_home)
    assert (again.status, again.detail) == ("ok", first.detail.split(" in ~/")[0])


def test_a_docker_host_needs_no_uv(bare_home: Findings) -> None:
    result = uv(LocalConnection(), HostProfile(runtime="docker"), bare_home)
    assert result.status == "skipped"
    assert not (Path(bare_home.facts.home) / UV_HOME_PATH).exists()


def test_another_architecture_is_skipped_not_failed(bare_home: Findings) -> None:
    facts = HostFacts(home=bare_home.facts.home, python="python3", version="3.11",
                      docker=False, gpus=0, arch="riscv64")  # fmt: skip
    other = Findings(host=facts)
    result = uv(LocalConnection(), HostProfile(runtime="bare"), other)
    assert result.status == "skipped" and "pip" in result.detail


def test_a_bare_job_rented_on_a_docker_cloud_bootstraps_for_bare() -> None:
    """`submit --up --runtime bare` on Lambda (a VM with Docker): bootstrap readies the host
    for the bare job (uv copied), not for Docker (where it would leave uv out and the job's
    environment would be made with pip, many times slower)."""
    from launcher.targets.cloud.hosts import UpOptions, host_profile

    assert host_profile("docker", UpOptions(gpu="a100", runtime="bare")).runtime == "bare"
    assert host_profile("docker", UpOptions(gpu="a100")).runtime == "docker"
    assert host_profile("bare", UpOptions(gpu="h100", provider="vast")).runtime == "bare"


def test_the_venv_check_runs_only_where_pip_will_make_the_environment(
    bare_home: Findings,
) -> None:
    """Making a venv with pip takes seconds: a host that gets uv (or runs Docker) is not
    asked for one; a host where no uv can go is, at the uv step, which says pip is used."""
    from launcher.bootstrap.steps import system

    found = Findings()
    result = system(LocalConnection(), HostProfile(runtime="bare"), found)
    assert result.status == "ok" and "venv" not in result.detail, result
    assert found.host is not None and found.host.version
    riscv = Findings(host=HostFacts(home=bare_home.facts.home, python="python3", version="3.11",
                                    docker=False, gpus=0, arch="riscv64"))  # fmt: skip
    without = uv(LocalConnection(), HostProfile(runtime="bare"), riscv)
    assert without.status == "skipped", without
    assert without.detail.startswith(
        "no uv here and none to copy: job environments are made with pip"
    )
