"""`submit --env/--env-file/--secret` as SkyPilot's, through the real CLI's dry run: a value
given is planned; a secret (and a task's `NAME: null` taken from this environment) is never
printed, only named on the start's stdin."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

TASK = "envs:\n  HF_TOKEN: null\n  MODEL: llama\nrun: echo $HF_TOKEN $MODEL\n"
SECRETS = "secrets:\n  HF_TOKEN: null\nrun: echo $HF_TOKEN\n"
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
    (TASK, ("--env", f"HF_TOKEN={VALUE}"), None, True),  # the task's null: a secret
    (TASK, ("--env-file", "ENVFILE"), None, True),
    (SECRETS, ("--env-file", "ENVFILE"), None, True),  # not "both in envs and secrets"
    (SPEC + "secrets: [HF_TOKEN]\n", ("--env", f"HF_TOKEN={VALUE}"), None, True),
    (SPEC, ("--secret", f"HF_TOKEN={VALUE}"), None, True),
    (SPEC, ("--env", "A=1", "--env", "HF_TOKEN=plain"), "HF_TOKEN=plain", False),
])  # fmt: skip
def test_values_given_and_secrets_masked(
    tmp_path: Path, gpujob: Callable, clean_env: pytest.MonkeyPatch, text: str,
    flags: tuple[str, ...], exported: str | None, secret: bool,
) -> None:  # fmt: skip
    spec = tmp_path / "task.yaml"
    spec.write_text(text)
    (tmp_path / ".env").write_text(f"# dotenv\nexport HF_TOKEN='{VALUE}'\nA=1\n")
    if "ENV" in flags:
        clean_env.setenv("HF_TOKEN", VALUE)
    args = [str(tmp_path / ".env") if f == "ENVFILE" else f for f in flags if f != "ENV"]
    result = gpujob("submit", str(spec), "--dry-run", *args)
    assert result.exit_code == 0, result.stderr
    printed = result.stdout + result.stderr
    assert VALUE not in printed  # the plan's text shows run.sh and job.json too
    as_json = gpujob("submit", str(spec), "--dry-run", "--json", *args)
    assert as_json.exit_code == 0 and VALUE not in as_json.stdout + as_json.stderr
    if secret:
        assert "never in a file on the host: HF_TOKEN=***" in printed
        assert '"HF_TOKEN"' not in result.stdout  # not in job.json's envs
    if exported:
        assert f"export {exported}" in result.stdout


@pytest.mark.parametrize("text, flags, line", [
    (TASK, (), "envs.HF_TOKEN: required (null in the task): give --secret HF_TOKEN=VALUE (or "
     "export HF_TOKEN and give --env HF_TOKEN)"),
    (TASK, ("--env", "A"), "--env A: A is not set in your environment"),
    (SPEC, ("--secret", "HF_TOKEN"), "--secret HF_TOKEN: not set in your environment"),
    (SPEC, ("--secret", VALUE), "--secret hf_... (18 characters): not set in your environment"),
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


def test_env_file_read_as_dotenv(
    tmp_path: Path, gpujob: Callable, clean_env: pytest.MonkeyPatch
) -> None:
    """A password's `#` and backslashes stay (not a shell's comment and escapes)."""
    spec = tmp_path / "own.yaml"
    spec.write_text("name: own\nimage: host\nrun:\n  shell: echo $A $B $C\n")
    (tmp_path / ".env").write_text('A=p@ss#word\nB=c:\\dir # a comment\nC="q\\"d"\n')
    result = gpujob("submit", str(spec), "--dry-run", "--env-file", str(tmp_path / ".env"))
    assert result.exit_code == 0, result.stderr
    for line in ("export A='p@ss#word'", "export B='c:\\dir'", "export C='q\"d'"):
        assert line in result.stdout, line


def test_flag_secret_leaves_gpujob_keys_alone(
    tmp_path: Path, gpujob: Callable, clean_env: pytest.MonkeyPatch
) -> None:
    """The job's AWS key is the job's: gpujob's own (its checkpoint remote's) stays."""
    clean_env.setenv("AWS_ACCESS_KEY_ID", "GPUJOBKEY")
    spec = tmp_path / "own.yaml"
    spec.write_text(SPEC)
    result = gpujob("submit", str(spec), "--dry-run", "--secret", "AWS_ACCESS_KEY_ID=JOBKEY")
    assert result.exit_code == 0, result.stderr
    assert "JOBKEY" not in result.stdout + result.stderr
    assert os.environ["AWS_ACCESS_KEY_ID"] == "GPUJOBKEY"


def test_resume_from_reads_the_spec_with_the_env_flags(
    tmp_path: Path, gpujob: Callable, clean_env: pytest.MonkeyPatch
) -> None:
    """--resume-from loads the spec as the launch does: the task's null is given by --env
    (refused before as `required`); the refusal is then about the checkpoint's remote."""
    spec = tmp_path / "task.yaml"
    spec.write_text(TASK)
    result = gpujob("submit", str(spec), "--dry-run", "--env", f"HF_TOKEN={VALUE}",
                    "--resume-from", "nosuch:prefix/run")  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert "--resume-from: no remote `nosuch`" in result.stderr, result.stderr
    assert VALUE not in result.stdout + result.stderr
