"""The dry run is the plan users read before anything happens: a golden file pins it, and a
secret's value never appears in it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from planning import REPO

GOLDEN = REPO / "tests" / "golden"
SECRET = "gj-test-token-7c41f09e-do-not-print"


def normalised(text: str) -> str:
    """Machine-specific paths out: the interpreter and the checkout."""
    return text.replace(sys.executable, "<python>").replace(str(REPO), "<repo>")


@pytest.fixture
def fixed_dirs(gpujob: Callable, monkeypatch: pytest.MonkeyPatch) -> Callable:
    """Fake state and cache dirs (never created by a dry run), run from the repo root."""
    monkeypatch.setenv("GPUJOB_STATE_DIR", "/state")
    monkeypatch.setenv("GPUJOB_CACHE_DIR", "/cache")
    monkeypatch.chdir(REPO)
    if sys.version_info[:2] != (3, 11):
        pytest.skip("images/lab-cpu.yaml is for Python 3.11; the local provider refuses others")
    return gpujob


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
        image=str(REPO / "images" / "lab-cpu.yaml"),
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
        secret = next(s for s in steps if s.get("path", "").endswith("/secrets.json"))
        assert (secret["secret"], secret["mode"]) == (True, 0o600)
        assert json.loads(secret["content"]) == {"GJ_TEST_TOKEN": "***"}
    else:
        assert '    | {"GJ_TEST_TOKEN": "***"}\n' in result.stdout


def test_schema_is_json_schema_of_the_spec(gpujob: Callable) -> None:
    result = gpujob("schema")
    assert (result.exit_code, result.stderr) == (0, "")
    schema = json.loads(result.stdout)
    assert {"name", "image", "run"} <= set(schema["required"])
    assert "entrypoint" in schema["$defs"]["RunSpec"]["properties"]
    assert schema["properties"]["run"] == {"$ref": "#/$defs/RunSpec"}
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema)
    with pytest.raises(jsonschema.ValidationError, match="nodse"):
        jsonschema.validate({"name": "t", "image": "host", "run": {}, "nodse": 2}, schema)


def test_the_quickstart_is_valid_under_the_schema(gpujob: Callable) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(gpujob("schema").stdout)
    jsonschema.validate(yaml.safe_load((REPO / "jobs" / "quickstart.yaml").read_text()), schema)
