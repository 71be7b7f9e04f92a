"""SkyPilot 0.13-0.14 fields gpujob reads and does not honour: one line each naming the field,
why, and what to do (not an unknown key), all of a file's at once; through the real CLI.
(Hooks, a git workdir and hf:// sources are honoured: test_sky_lifecycle.py.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

NOT_YET = "not supported yet by gpujob"


@pytest.mark.parametrize("text, lines", [
    ("config:\n  hooks:\n    preemption: echo bye\n", [
        "2: config.hooks: SkyPilot's `config.hooks`: gpujob cannot honour it (it must be a list "
        "of {run, events, timeout}); write `- run: |` entries"]),
    ("config:\n  kubernetes:\n    pod_config: {}\n  vast:\n    datacenter_only: true\n", [
        "2: config.kubernetes: SkyPilot's `config.kubernetes`: gpujob cannot honour it (it "
        "changes SkyPilot itself (its `kubernetes` settings), and gpujob has no such setting); "
        "remove it",
        "4: config.vast: SkyPilot's `config.vast`: gpujob cannot honour it (it changes SkyPilot "
        "itself (its `vast` settings), and gpujob has no such setting); remove it"]),
    ("service:\n  replicas: 2\n", [
        "1: service: SkyPilot's `service`: gpujob cannot honour it (SkyServe (replicas behind a "
        "load balancer) is SkyPilot's own); gpujob runs jobs, not services: serve with SkyPilot, "
        "or run the server in `run:` and reach it with `gpujob port-forward`"]),
    ("name: trainer\n---\nname: rollout\n", [
        "2: several YAML documents without `execution: parallel` in the first (a SkyPilot "
        f"pipeline: tasks one after another) are {NOT_YET}; a job group is read only by "
        "`gpujob submit`. for tasks that run side by side, begin with a header document "
        "(`name:` and `execution: parallel`) and `gpujob submit` it; else submit each document "
        "as its own file"]),
])  # fmt: skip
def test_one_line_each_naming_the_field(
    tmp_path: Path, gpujob: Callable, text: str, lines: list[str]
) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(text + "run: echo hi\n" if "---" not in text else
                    "run: echo 1\n" + text + "run: echo 2\n")  # fmt: skip
    if "---" in text:
        lines = [line.replace("2: several", "3: several", 1) for line in lines]
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"gpujob: error: {path}:{line}" for line in lines]
