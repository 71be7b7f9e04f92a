"""SkyPilot 0.14's `config.hooks`, `workdir: {url, ref}` and `hf://` sources, read from a task
file through the real CLI: the dry run shows the clone, the downloads at the head of setup
(the token never on a command line or in the plan) and the hook scripts; a file's mistakes
come all at once, one line each at its line. The agent's side: test_lifecycle_hooks.py."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

TASK = """\
name: trainer
workdir:
  url: file:///srv/repo.git
  ref: v1
file_mounts:
  ~/models/llama: hf://meta-llama/Llama-3.2-1B@main
  data: hf://datasets/org/set/train
envs:
  GREETING: hello
  HF_TOKEN: null
config:
  hooks:
    - run: git push
      events: [stop, down]
      timeout: 30
    - run: echo bye
setup: pip list
run: echo hi
"""


def _written(out: str, name: str) -> str:
    """A file the dry run writes, as it shows it (`| ` lines under its `write` line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  write ")
                 and line.split()[1].endswith(name))  # fmt: skip
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("    |"):
            break
        body.append(line[6:])
    return "\n".join(body)


def test_dry_run_shows_clone_downloads_and_hooks(
    tmp_path: Path, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_not_for_any_log")
    path = tmp_path / "task.yaml"
    path.write_text(TASK)
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "hf_not_for_any_log" not in out + result.stderr
    assert f"{path}:2: workdir -> workdir_git: {{'url': 'file:///srv/repo.git', 'ref': 'v1'}}" \
        in result.stderr  # fmt: skip
    assert "# clone file:///srv/repo.git at v1 as the workdir" in out
    clone = next(line for line in out.splitlines() if "file:///srv/repo.git v1 " in line)
    assert clone.rstrip().endswith("/workdir")
    setup = _written(out, "node-0/setup.sh")
    fetches = [line for line in setup.splitlines() if line.startswith("gpujob_hf ")]
    assert fetches == [
        "gpujob_hf data hf://datasets/org/set/train org/set --repo-type dataset --include train "
        "--include 'train/*'",
        'gpujob_hf "$HOME"/models/llama hf://meta-llama/Llama-3.2-1B@main meta-llama/Llama-3.2-1B '
        "--repo-type model --revision main",
    ]
    assert setup.rstrip().endswith("pip list")  # the downloads come before the task's setup
    hook = _written(out, "node-0/hooks/0.sh")
    assert "export GREETING=hello" in hook and hook.rstrip().endswith("git push")
    assert "HF_TOKEN" not in hook  # a secret is never written on the host
    config = json.loads(_written(out, "node-0/job.json"))
    assert config["lifecycle_hooks"] == [
        {"script": "hooks/0.sh", "events": ["stop", "down"], "timeout": 30},
        {"script": "hooks/1.sh", "events": ["stop", "preemption", "down"], "timeout": 3600},
    ]


def test_hooks_only_on_node_zero(tmp_path: Path, gpujob: Callable) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("num_nodes: 2\nconfig:\n  hooks:\n    - run: echo bye\nrun: echo hi\n")
    result = gpujob("submit", str(path), "--dry-run", "--on", "a,b")
    assert result.exit_code == 0, result.stderr
    assert re.findall(r"write \S+/node-(\d)/hooks/0.sh", result.stdout) == ["0"]


def test_every_mistake_at_once_one_line_each(tmp_path: Path, gpujob: Callable) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("""\
workdir:
  url: not-a-url
file_mounts:
  /models: hf://justname
config:
  hooks:
    - run: echo one
      events: [restart]
    - timeout: 0
      run: echo two
    - events: [stop]
run: echo hi
""")
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"gpujob: error: {path}:{line}" for line in [
        "2: workdir_git.url: not-a-url is not a git URL; give https://..., ssh://..., "
        "git@HOST:PATH or file://... (got 'not-a-url')",
        "4: hf_mounts./models: hf://justname is not a Hugging Face source; write hf://ORG/NAME "
        "for a model, hf://datasets/ORG/NAME or hf://spaces/ORG/NAME, with @REVISION and a /PATH "
        "inside it if wanted",
        "8: hooks.0.events.0: Input should be 'stop', 'preemption' or 'down' (got 'restart')",
        "9: hooks.1.timeout: Input should be greater than or equal to 1 (got 0)",
        "11: hooks.2.run: required field is missing; add `run:` to the spec",
    ]]  # fmt: skip


def test_a_destination_outside_the_job_folder_here_is_refused_at_its_line(
    tmp_path: Path, gpujob: Callable
) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("file_mounts:\n  /models: hf://org/model\nrun: echo hi\n")
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 2
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"gpujob: error: {path}:2: file_mounts./models: a job on this "
                           "machine writes only inside its own folder")  # fmt: skip
