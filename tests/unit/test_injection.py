"""Spec values reach the program literally: the rendered run script is executed for real, with
a stand-in `python` that reports the argv and environment it was given."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from planning import execute, plan_of, reporting_target, spec_of

from launcher.errors import UsageError
from launcher.spec.load import load_job_spec


def hostile(pwned: Path) -> list[str]:
    """Shell metacharacters a spec may hold; none may run, each must arrive byte for byte."""
    return [
        f"$(touch {pwned}-dollar)",
        f"`touch {pwned}-backtick`",
        "'; rm -rf x; '",
        f'"; touch {pwned}-double-quote; "',
        f"--out=$(touch {pwned}-flag)",
        "line one\nline two",
        f"first\n touch {pwned}-newline",
        "$HOME",
        "$((6*7))",
        "~",
        "*",
        "\\",
        "a'b\"c",
        "!!",
        "",
        " padded ",
        "tab\there",
        "ünïcode ✓",
        f"; touch {pwned}-semicolon",
        f"| touch {pwned}-pipe",
        f"> {pwned}-redirect",
    ]


def test_spec_values_reach_the_program_literally(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    values = hostile(pwned)
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {
                "name": "inject",
                "image": "host",
                "run": {"entrypoint": "train.py", "args": values},
                "envs": {f"HOSTILE_{i}": value for i, value in enumerate(values)},
                "nccl": {"NCCL_DEBUG": f"$(touch {pwned}-nccl)"},
            },
            allow_unicode=True,
        )
    )
    spec = load_job_spec(spec_file).spec
    where = reporting_target(tmp_path)
    seen = execute(plan_of(spec, where))

    assert sorted(p.name for p in tmp_path.glob("pwned*")) == []
    assert seen["argv"][-len(values) - 1 :] == ["train.py", *values]
    assert {key: seen["env"][key] for key in spec.envs} == spec.envs
    assert seen["env"]["NCCL_DEBUG"] == f"$(touch {pwned}-nccl)"
    assert seen["env"]["HOME"] == "/home/expanded"


def test_macros_are_substituted_but_their_values_stay_literal(tmp_path: Path) -> None:
    spec = spec_of(
        run={"entrypoint": "train.py", "args": ["--run=${job_id}", "${node_rank}/${nnodes}"]},
        checkpoints={"dir": "ck $(x)"},
    )
    where = reporting_target(tmp_path)
    seen = execute(plan_of(spec, where, job_id="job.7"))
    assert seen["argv"][-3:] == ["train.py", "--run=job.7", "0/1"]
    assert seen["env"]["GPUJOB_CHECKPOINT_DIR"] == f"{tmp_path}/jobs/job.7/ck $(x)"


def test_a_job_id_cannot_run_commands(tmp_path: Path) -> None:
    """A job id names folders and goes into the run script, so one that could end a shell line
    (a newline, a `#`) is refused before any plan exists, with the id shown as given."""
    pwned = tmp_path / "pwned-job-id"
    job_id = f"x\ntouch {pwned} #"
    with pytest.raises(UsageError, match=re.escape(f"job id {job_id!r}: use letters, digits")):
        plan_of(spec_of(), reporting_target(tmp_path), job_id=job_id)
    assert not pwned.exists()


@pytest.mark.parametrize("job_id", ["../escape", "a/b", "x\ny", "-rf", "a b"])
def test_a_job_id_must_be_a_plain_name(gpujob: Callable, tmp_path: Path, job_id: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nrun:\n  entrypoint: train.py\n")
    result = gpujob("submit", str(spec), "--dry-run", "--job-id", job_id)
    assert result.exit_code == 2, result.stdout[:200]
    assert result.stderr.startswith("gpujob: error: ")
    assert "--job-id" in result.stderr
