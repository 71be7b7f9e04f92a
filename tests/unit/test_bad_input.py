"""Bad input: exit code 2, one line on stderr naming file:line and field with a fix, and nothing
written. Each case is run without --dry-run, so "nothing written" is a real check."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from planning import REPO

VALID = "name: t\nimage: host\nrun:\n  entrypoint: train.py\n"

# (id, spec text, --set flags, where: `:LINE` in the spec or the flag, the field as named, the fix)
CASES = [
    ("missing-run", "name: t\nimage: host\n", [], ":1", "run:", "add `run:` to the spec"),
    ("wrong-type", VALID + "nodes: two\n", [], ":5", "nodes:", "valid integer"),
    ("unknown-key", VALID + "nodse: 2\n", [], ":5", "nodse:", "did you mean `nodes`?"),
    (  # Lambda's name rule (OpenAPI 1.10 FilesystemCreateRequest): refused here, not by its 400
        "filesystem-name",
        VALID + "resources:\n  filesystem: my_ckpts\n",
        [],
        ":6",
        "resources.filesystem:",
        "String should match pattern '^[A-Za-z][A-Za-z0-9-]{0,59}$'",
    ),
    (
        "unknown-nested-key",
        "name: t\nimage: host\nrun:\n  entrypiont: train.py\n",
        [],
        ":4",
        "run.entrypiont:",
        "did you mean `entrypoint`?",
    ),
    (
        "yaml-syntax",
        VALID + "  nproc_per_node: 2\n   args: [a]\n",
        [],
        ":6:8",
        "YAML syntax error:",
        "fix the YAML at that line",
    ),
    (
        "batch-does-not-divide",
        VALID + "  nproc_per_node: 2\nbatch:\n  micro_batch: 4\n  global_batch: 10\n",
        [],
        ":8",
        "batch.global_batch:",
        "use a global_batch of 8 or 16",
    ),
    ("set-unknown-key", VALID, ["rn.args=x"], "--set rn.args", "rn:", "did you mean `run`?"),
    (
        "set-unknown-profile",
        VALID + "profiles:\n  gpu: {nodes: 1}\n",
        ["profile=nope"],
        "--set profile",
        "profile:",
        "known profiles: gpu",
    ),
    (
        "secret-named-docker-host",
        VALID + "secrets:\n  - DOCKER_HOST\n",
        [],
        ":5",
        "secrets",
        "put its value under another name",
    ),
    (
        "secret-not-set",
        VALID + "secrets:\n  - GJ_TEST_UNSET_SECRET\n",
        [],
        ":6",
        "secrets:",
        "export GJ_TEST_UNSET_SECRET=",
    ),
    (
        "unknown-macro",
        VALID + '  args: ["--out", "${nope}"]\n',
        [],
        ":5",
        "run.args:",
        "known: ${checkpoint_dir}",
    ),
    (
        "metrics-pattern-not-a-regex",
        VALID + "metrics:\n  from_log: 'loss (?P<loss>[0-9.]+'\n",
        [],
        ":6",
        "metrics.from_log:",
        "not a valid regular expression: missing ), unterminated subpattern",
    ),
    (
        "image-not-defined",
        "name: t\nimage: no-such-image\nrun:\n  entrypoint: train.py\n",
        [],
        ":2",
        "image `no-such-image`:",
        "known definitions: current-cu130, lab-cpu",
    ),
]


@pytest.fixture
def submit_bad(
    tmp_path: Path, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str, list[str]], tuple[Path, str]]:
    """Write the spec (next to an images/ folder), submit it for real, check the common
    contract, and return (spec path, the error line)."""
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml", images)
    monkeypatch.delenv("GJ_TEST_UNSET_SECRET", raising=False)

    def submit(text: str, sets: list[str]) -> tuple[Path, str]:
        spec = tmp_path / "job.yaml"
        spec.write_text(text)
        flags = [f"--set={item}" for item in sets]
        result = gpujob("submit", str(spec), *flags, "--job-id", "bad-1")
        assert result.exit_code == 2, result
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("gpujob: error: "), lines[0]
        assert "Traceback" not in result.stderr
        state = Path(tmp_path / "state")
        assert not (state / "jobs").exists()
        if (state / "state.db").exists():
            with sqlite3.connect(state / "state.db") as db:
                assert db.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
        return spec, lines[0]

    return submit


@pytest.mark.parametrize(("text", "sets", "where", "field", "fix"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_is_one_line_with_the_field_and_a_fix(
    submit_bad: Callable, text: str, sets: list[str], where: str, field: str, fix: str
) -> None:
    _, line = submit_bad(text, sets)
    assert f" {field}" in line, line
    assert fix in line, line


@pytest.mark.parametrize(("text", "sets", "where"), [c[1:4] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_names_where_it_was_written(
    submit_bad: Callable, text: str, sets: list[str], where: str
) -> None:
    spec, line = submit_bad(text, sets)
    expected = f"{spec}{where}:" if where.startswith(":") else f"{where}: "
    assert line.startswith(f"gpujob: error: {expected}"), line


def test_missing_spec_file_is_a_usage_error(gpujob: Callable, tmp_path: Path) -> None:
    result = gpujob("submit", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    missing = tmp_path / "nope.yaml"
    assert result.stderr == f"gpujob: error: {missing}: no such job spec. check the path\n"


def test_a_bad_spec_is_reported_before_a_bad_host(gpujob: Callable, tmp_path: Path) -> None:
    """`--on` hosts are contacted while the spec loads; the spec's mistake still comes first,
    and the host's is one line too, with nothing recorded."""
    spec = tmp_path / "job.yaml"
    spec.write_text(VALID + "nodse: 2\n")
    bad_spec = gpujob("submit", str(spec), "--on", "gpu1:99999")
    assert bad_spec.exit_code == 2
    assert bad_spec.stderr.startswith(f"gpujob: error: {spec}:5: nodse:"), bad_spec.stderr

    spec.write_text(VALID)
    (tmp_path / "train.py").write_text("print(1)\n")
    bad_host = gpujob("submit", str(spec), "--on", "gpu1:99999")
    assert bad_host.exit_code == 2
    assert bad_host.stderr.startswith("gpujob: error: --on gpu1:99999: 99999 is not a port")
    assert len(bad_host.stderr.splitlines()) == 1 and "Traceback" not in bad_host.stderr
