"""`submit --env/--env-file/--secret` as SkyPilot's, through the real CLI's dry run: a value
given is planned; a secret (and a task's `NAME: null` taken from this environment) is never
printed, only named on the start's stdin."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

TASK = "envs:\n  HF_TOKEN: null\n  MODEL: llama\nrun: echo $HF_TOKEN $MODEL\n"
SPEC = "name: own\nimage: host\nrun:\n  shell: echo $HF_TOKEN\n"
VALUE = "hf_Very5ecretValue"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """HF_TOKEN and A absent, and restored after (`--secret K=V` sets it in-process)."""
    for name in ("HF_TOKEN", "A"):
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize("text, flags, exported, secret", [
    (TASK, ("--secret", f"HF_TOKEN={VALUE}"), None, True),
    (TASK, ("--env", "HF_TOKEN", "ENV"), None, True),  # ENV: HF_TOKEN exported first
    (TASK, ("ENV",), None, True),  # the task's null alone, from this environment
    (TASK, ("--set", "envs.HF_TOKEN=plain"), "HF_TOKEN=plain", False),
    (TASK, ("--env", "HF_TOKEN=plain"), "HF_TOKEN=plain", False),
    (TASK, ("--env-file", "ENVFILE"), "HF_TOKEN='two words'", False),
    (SPEC, ("--secret", f"HF_TOKEN={VALUE}"), None, True),
    (SPEC, ("--env", "A=1", "--env", "HF_TOKEN=plain"), "HF_TOKEN=plain", False),
])  # fmt: skip
def test_values_given_and_secrets_masked(
    tmp_path: Path, gpujob: Callable, clean_env: pytest.MonkeyPatch, text: str,
    flags: tuple[str, ...], exported: str | None, secret: bool,
) -> None:  # fmt: skip
    spec = tmp_path / "task.yaml"
    spec.write_text(text)
    (tmp_path / ".env").write_text("# dotenv\nexport HF_TOKEN='two words'\nA=1\n")
    if "ENV" in flags:
        clean_env.setenv("HF_TOKEN", VALUE)
    args = [str(tmp_path / ".env") if f == "ENVFILE" else f for f in flags if f != "ENV"]
    result = gpujob("submit", str(spec), "--dry-run", *args)
    assert result.exit_code == 0, result.stderr
    printed = result.stdout + result.stderr
    assert VALUE not in printed
    if secret:
        assert "never in a file on the host: HF_TOKEN=***" in printed
        assert '"HF_TOKEN"' not in result.stdout  # not in job.json's envs
    if exported:
        assert f"export {exported}" in result.stdout


@pytest.mark.parametrize("text, flags, line", [
    (TASK, (), "envs.HF_TOKEN: required (null in the task): export HF_TOKEN, or give --env "
     "HF_TOKEN=VALUE or --secret HF_TOKEN=VALUE"),
    (TASK, ("--env", "A"), "--env A: A is not set in your environment"),
    (SPEC, ("--secret", "HF_TOKEN"), "--secret HF_TOKEN: HF_TOKEN is not set in your environment"),
    (SPEC, ("--env", "1A=2"), "--env 1A: not a variable name"),
    (SPEC, ("--env-file", "BAD"), ".bad:2: not NAME=VALUE"),
    (SPEC, ("--env-file", "MISSING"), "--env-file MISSING: No such file or directory"),
])  # fmt: skip
def test_bad_flags_are_one_line(
    tmp_path: Path, gpujob: Callable, clean_env: pytest.MonkeyPatch, text: str,
    flags: tuple[str, ...], line: str,
) -> None:  # fmt: skip
    spec = tmp_path / "task.yaml"
    spec.write_text(text)
    (tmp_path / ".bad").write_text("A=1\nnot a line\n")
    args = [str(tmp_path / ".bad") if f == "BAD" else f for f in flags]
    result = gpujob("submit", str(spec), "--dry-run", *args)
    assert result.exit_code == 2, result.stderr
    assert line in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
