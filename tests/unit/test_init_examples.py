"""`gpujob init`: every shipped example lands in an empty folder and plans from there, a second
init refuses before writing anything, and the errors and --help point to it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.examples import list_examples
from tests.conftest import REPO, Result

NAMES = [ex.name for ex in list_examples(REPO / "jobs")]


def test_without_a_name_init_lists_every_example_of_jobs(gpujob: Callable[..., Result]) -> None:
    done = gpujob("init")
    assert done.exit_code == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines()[: len(NAMES)]]
    assert listed == sorted(p.stem for p in (REPO / "jobs").glob("*.yaml"))
    assert "quickstart" in listed and "sky-torchrun" in listed


@pytest.mark.parametrize("name", NAMES)
def test_each_example_is_written_as_in_jobs_and_plans_from_the_folder(
    name: str, gpujob: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("HF_TOKEN", "hf_example")  # the LLM examples name it in `secrets:`
    done = gpujob("init", name)
    assert done.exit_code == 0, done.stderr
    written = sorted(p.relative_to(here) for p in here.rglob("*") if p.is_file())
    assert (here / f"{name}.yaml").read_bytes() == (REPO / "jobs" / f"{name}.yaml").read_bytes()
    for rel in written:
        assert (here / rel).read_bytes() == (REPO / "jobs" / rel).read_bytes(), rel
        assert (here / rel).stat().st_mode == (REPO / "jobs" / rel).stat().st_mode, rel
    # shm_gb is checked against this machine's /dev/shm: ppo asks 32 GB, more than some have
    plan = gpujob("submit", f"{name}.yaml", "--dry-run", "--set", "resources.shm_gb=1")
    assert plan.exit_code == 0, plan.stderr
    assert f"job {name}-" in plan.stdout


def test_init_refuses_to_overwrite_and_writes_nothing(
    gpujob: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").mkdir()
    (tmp_path / "quickstart" / "train.py").write_text("mine\n")
    done = gpujob("init", "quickstart")
    assert done.exit_code == 2
    assert done.stderr.startswith("gpujob: error: quickstart/train.py exists")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "quickstart.yaml").exists()
    assert (tmp_path / "quickstart" / "train.py").read_text() == "mine\n"


def test_an_unknown_example_is_one_line_naming_the_choices(gpujob: Callable[..., Result]) -> None:
    done = gpujob("init", "nope")
    assert done.exit_code == 2
    assert "no example named `nope`" in done.stderr and "quickstart" in done.stderr


def test_init_writes_into_dir(gpujob: Callable[..., Result], tmp_path: Path) -> None:
    done = gpujob("init", "ray", "--dir", str(tmp_path / "new"))
    assert done.exit_code == 0, done.stderr
    assert (tmp_path / "new" / "ray.yaml").is_file() and (tmp_path / "new" / "ray").is_dir()


def test_help_and_the_empty_spec_error_point_to_init(
    gpujob: Callable[..., Result], tmp_path: Path
) -> None:
    assert "gpujob init quickstart" in gpujob("--help").stdout
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    done = gpujob("submit", str(empty), "--dry-run")
    assert done.exit_code == 2
    assert "gpujob init quickstart" in done.stderr
    assert "jobs/quickstart.yaml" not in done.stderr
