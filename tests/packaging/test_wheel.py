"""The wheel as a user gets it: built from the sdist, `twine check` clean, installed with
`uv tool install` into folders of its own (no checkout on the path), then used from an empty
folder: --version, init, a dry run and bash completion."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`uv tool install WHEEL`: gpujob on a bin folder of its own, its own environment."""
    root = tmp_path_factory.mktemp("tool")
    env = {**os.environ, "UV_TOOL_DIR": str(root / "tools"), "UV_TOOL_BIN_DIR": str(root / "bin")}
    env.pop("PYTHONPATH", None)
    wheel = next(dist.glob("*.whl"))
    subprocess.run([str(BIN / "uv"), "tool", "install", "--quiet", str(wheel)], env=env,
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    yield root / "bin"
    shutil.rmtree(root, ignore_errors=True)


def user_run(bin_dir: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it: the tool's bin first on PATH, no checkout on PYTHONPATH."""
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    env["GPUJOB_STATE_DIR"] = str(cwd / ".state")
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_twine_check_passes_on_the_wheel_and_the_sdist(dist: Path) -> None:
    files = sorted(str(p) for p in dist.iterdir())
    assert len(files) == 2
    done = subprocess.run([str(BIN / "twine"), "check", "--strict", *files],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_wheel_carries_the_license_and_jobs_as_its_examples(dist: Path) -> None:
    wheel = zipfile.ZipFile(next(dist.glob("*.whl")))
    names = set(wheel.namelist())
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = wheel.read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text and "Project-URL: Documentation" in text
    jobs = REPO / "jobs"
    shipped = {n.removeprefix("launcher/examples/") for n in names
               if n.startswith("launcher/examples/")}  # fmt: skip
    expected = {str(p.relative_to(jobs)) for p in jobs.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}  # fmt: skip
    assert shipped == expected
    for rel in expected:
        assert wheel.read(f"launcher/examples/{rel}") == (jobs / rel).read_bytes(), rel


def test_from_an_empty_folder_version_init_and_a_dry_run_work(
    installed: Path, tmp_path: Path
) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    done = user_run(installed, tmp_path, "gpujob", "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"gpujob, version {version}"
    done = user_run(installed, tmp_path, "gpujob", "init", "quickstart")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "quickstart.yaml").is_file()
    assert (tmp_path / "quickstart" / "train.py").is_file()
    done = user_run(installed, tmp_path, "gpujob", "submit", "quickstart.yaml", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "torch.distributed.run" in done.stdout
    assert str(REPO) not in done.stdout  # the installed agent, not the checkout's


@pytest.mark.parametrize(("words", "cword", "expected"), [
    ("gpujob sub", 1, "submit"),
    ("gpujob init quick", 2, None),  # EXAMPLE is free text: no crash, no traceback
    ("gpujob submit --dry", 2, "--dry-run"),
])  # fmt: skip
def test_bash_completion_from_the_printed_script_completes_commands(
    installed: Path, tmp_path: Path, words: str, cword: int, expected: str | None
) -> None:
    script = user_run(installed, tmp_path, "gpujob", "completion", "bash").stdout
    probe = (f'{script}\nCOMP_WORDS=({words}); COMP_CWORD={cword}; '
             '_gpujob_completion gpujob; printf "%s\\n" "${COMPREPLY[@]}"')  # fmt: skip
    done = user_run(installed, tmp_path, "bash", "-c", probe)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    if expected is not None:
        assert expected in done.stdout.split(), done.stdout


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_are_click_s_for_gpujob(installed: Path, tmp_path: Path,
                                                     shell: str) -> None:  # fmt: skip
    done = user_run(installed, tmp_path, "gpujob", "completion", shell)
    assert done.returncode == 0 and "_GPUJOB_COMPLETE" in done.stdout
