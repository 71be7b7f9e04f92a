"""The dry run is the plan users read before anything happens: a golden file pins it, and a
secret's value never appears in it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
import yaml
from planning import REPO

GOLDEN = REPO / "tests" / "golden"
SECRET = "gj-test-token-7c41f09e-do-not-print"


def normalised(text: str) -> str:
    """Machine-specific paths out: the interpreter and the checkout."""
    return text.replace(sys.executable, "<python>").replace(str(REPO), "<repo>")


class PythonRunning:
    """`sys` as the local provider sees it, but running another Python version: the only
    thing in a local dry run that depends on the running Python, besides the interpreter's
    path, is the provider's refusal of an image made for another minor version."""

    def __init__(self, version: str) -> None:
        major, minor = (int(part) for part in version.split("."))
        self.version_info = SimpleNamespace(major=major, minor=minor)

    def __getattr__(self, name: str) -> object:
        return getattr(sys, name)


def quickstart_python() -> str:
    """The Python version the quickstart's image (lab-cpu) is made for."""
    from launcher.spec.image import load_image_definition

    image = load_image_definition("lab-cpu", REPO / "jobs")
    assert image is not None
    return image.python


@pytest.fixture
def fixed_dirs(gpujob: Callable, monkeypatch: pytest.MonkeyPatch) -> Callable:
    """Fake state and cache dirs (never created by a dry run), one user name, run from the
    repo root, on a machine that runs the image's Python: the golden plan is the same on
    every machine and Python."""
    monkeypatch.setenv("GPUJOB_STATE_DIR", "/state")
    monkeypatch.setenv("GPUJOB_CACHE_DIR", "/cache")
    monkeypatch.setenv("LOGNAME", "golden")  # SKYPILOT_USER on every node
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("launcher.targets.local.sys", PythonRunning(quickstart_python()))
    # the venv gpujob runs from, which leaves the job's PATH: the same on every machine
    monkeypatch.setattr("launcher.remote.local_facts.own_venv_bin", lambda: ("/gpujob-venv/bin",))
    return gpujob


def test_an_image_for_another_python_is_refused_on_this_machine(
    fixed_dirs: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a machine running another Python than the image's gets: a usage error, no plan."""
    wanted = quickstart_python()
    major, minor = wanted.split(".")
    other = f"{major}.{int(minor) + 1}"
    monkeypatch.setattr("launcher.targets.local.sys", PythonRunning(other))
    result = fixed_dirs("submit", "jobs/quickstart.yaml", "--dry-run", "--job-id", "q")
    assert result.exit_code == 2
    assert f"image lab-cpu is for Python {wanted} but this machine runs {other}" in result.stderr
    assert "--set image=host" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("golden", "flags"),
    [("quickstart-dry-run.txt", []), ("quickstart-dry-run.json", ["--json"])],
)
def test_quickstart_dry_run_matches_the_golden_file(
    fixed_dirs: Callable, golden: str, flags: list[str]
) -> None:
    result = fixed_dirs(
        "submit", "jobs/quickstart.yaml", "--dry-run", *flags, "--job-id", "quickstart-golden"
    )
    assert (result.exit_code, result.stderr) == (0, "")
    assert not Path("/state").exists()
    actual = normalised(result.stdout)
    path = GOLDEN / golden
    if os.environ.get("GPUJOB_UPDATE_GOLDEN") == "1":
        path.write_text(actual)
    assert actual == path.read_text(), (
        f"the dry run changed; if that is intended: GPUJOB_UPDATE_GOLDEN=1 pytest {__file__}"
    )


@pytest.mark.parametrize("sets", [[], ["--set", "profile=gpu"]], ids=["cpu", "gpu-profile"])
@pytest.mark.parametrize("flags", [[], ["--json"]], ids=["text", "json"])
def test_a_secret_value_never_appears_in_the_dry_run(
    fixed_dirs: Callable,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sets: list[str],
    flags: list[str],
) -> None:
    data = yaml.safe_load((REPO / "jobs" / "quickstart.yaml").read_text())
    data.update(
        workdir=str(REPO / "jobs" / "quickstart"),
        image=str(REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml"),
        secrets=["GJ_TEST_TOKEN"],
    )
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("GJ_TEST_TOKEN", SECRET)
    result = fixed_dirs("submit", str(spec), "--dry-run", *flags, *sets, "--job-id", "s")
    assert (result.exit_code, result.stderr) == (0, "")
    assert SECRET not in result.stdout
    assert "***" in result.stdout
    if flags:
        steps = json.loads(result.stdout)["nodes"][0]["steps"]
        start = next(s for s in steps if s.get("starts_job"))
        assert start["input"] == {"names": ["GJ_TEST_TOKEN"], "content": "***", "on": "stdin"}
        assert not any(s.get("secret") for s in steps)  # no secret file at all
    else:
        assert "# on its stdin, never in a file on the host: GJ_TEST_TOKEN=***" in result.stdout


def test_schema_is_json_schema_of_the_spec(gpujob: Callable) -> None:
    result = gpujob("schema")
    assert (result.exit_code, result.stderr) == (0, "")
    schema = json.loads(result.stdout)
    assert {"name", "image", "run"} <= set(schema["required"])
    assert "entrypoint" in schema["$defs"]["RunSpec"]["properties"]
    assert schema["properties"]["run"]["anyOf"][0] == {"$ref": "#/$defs/RunSpec"}
    assert schema["properties"]["run"]["anyOf"][1]["type"] == "string"  # a shell block
    jsonschema.Draft202012Validator.check_schema(schema)
    with pytest.raises(jsonschema.ValidationError, match="nodse"):
        jsonschema.validate({"name": "t", "image": "host", "run": {}, "nodse": 2}, schema)


def test_the_quickstart_is_valid_under_the_schema(gpujob: Callable) -> None:
    schema = json.loads(gpujob("schema").stdout)
    jsonschema.validate(yaml.safe_load((REPO / "jobs" / "quickstart.yaml").read_text()), schema)
