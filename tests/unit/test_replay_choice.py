"""Which capture `gpujob replay` takes, and its `--set` values: pure rules, table-driven."""

from __future__ import annotations

import pytest

from launcher.agent.replay_run import Refused, choose, command
from launcher.commands.replay import parse_sets
from launcher.errors import UsageError

FOUND = {(6, 0): "a", (6, 1): "b", (7, 1): "c", (7, 0): "d"}


@pytest.mark.parametrize(
    ("step", "rank", "first", "picked"),
    [
        (None, None, None, (7, 0)),  # the latest step, its lowest rank
        (None, None, {1: {"saved_at": 1.0}, 0: {"saved_at": 2.0}}, (7, 1)),  # saved first
        (6, None, None, (6, 0)),
        (None, 1, None, (7, 1)),
        (6, 1, None, (6, 1)),
    ],
)
def test_the_capture_taken(step, rank, first, picked) -> None:
    assert choose(FOUND, step, rank, "S3", first) == picked


@pytest.mark.parametrize(("found", "step", "rank", "code"),
                         [({}, None, None, 1), (FOUND, 8, None, 2), (FOUND, 6, 3, 2)])  # fmt: skip
def test_no_capture_is_one_line_naming_what_is_there(found, step, rank, code) -> None:
    with pytest.raises(Refused) as refused:
        choose(found, step, rank, "S3:run/captures")
    assert refused.value.code == code
    assert "\n" not in str(refused.value) and "S3:run/captures" in str(refused.value)
    if found:
        assert "rank-1/step-7" in str(refused.value)


@pytest.mark.parametrize(
    ("argv", "launcher", "runs"),
    [
        (["python", "replay.py"], "torchrun", ["python", "replay.py"]),
        (["python3", "r.py", "--x"], "deepspeed",
         ["python3", "-u", "-m", "deepspeed.launcher.runner", "--num_gpus=1", "r.py", "--x"]),
        (["r.py"], "deepspeed",
         ["python3", "-u", "-m", "deepspeed.launcher.runner", "--num_gpus=1", "r.py"]),
    ],
)  # fmt: skip
def test_one_gpu_under_deepspeed_when_the_job_used_it(argv, launcher, runs) -> None:
    assert command({"argv": argv, "launcher": launcher}) == runs


def test_sets_are_variables() -> None:
    assert parse_sets(("FAST_PATH=0", "A=b=c", "E=")) == {"FAST_PATH": "0", "A": "b=c", "E": ""}
    for bad in ("FAST_PATH", "1X=2", "=3"):
        with pytest.raises(UsageError, match="KEY=VALUE"):
            parse_sets((bad,))
