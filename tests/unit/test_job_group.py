"""SkyPilot job groups (spec/job_group.py, jobs/group.py): the file read as SkyPilot reads it,
every error of every document at once at its line, the addresses each task is given, the
plan of each task, and SkyPilot's end rule; through the real CLI where a user would look."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.jobs.group import GroupRecord, Member, decide
from launcher.spec.job_group import group_env, host_env_name, is_group_file, read_group
from launcher.state.db import JobRecord

GROUP = """\
---
name: rl
execution: parallel
primary_tasks: [trainer]
termination_delay: {default: 30s, reward-server: 2m}
---
name: trainer
num_nodes: 2
run: |
  echo "reward at $SKYPILOT_JOBGROUP_HOST_REWARD_SERVER"
---
name: reward-server
resources:
  cpus: 2
run: python3 -m http.server 8002
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "group.yaml"
    path.write_text(text)
    return path


def test_the_header_and_tasks_as_skypilot_reads_them(tmp_path: Path) -> None:
    group = read_group(write(tmp_path, GROUP))
    assert group.name == "rl" and not group.errors
    assert [(t.name, t.nodes, t.primary) for t in group.tasks] == [
        ("trainer", 2, True), ("reward-server", 1, False)]  # fmt: skip
    assert group.delay("reward-server") == 120 and group.delay("trainer") == 30


def test_every_task_is_given_the_group_and_each_tasks_address(tmp_path: Path) -> None:
    group = read_group(write(tmp_path, GROUP))
    env = group_env(group, {"trainer": "10.0.0.1", "reward-server": "10.0.0.3"})
    assert env == {
        "SKYPILOT_JOBGROUP_NAME": "rl",
        "SKYPILOT_JOBGROUP_HOST_TRAINER": "10.0.0.1",
        "SKYPILOT_JOBGROUP_HOST_REWARD_SERVER": "10.0.0.3",
    }
    assert host_env_name("rollout-server") == "SKYPILOT_JOBGROUP_HOST_ROLLOUT_SERVER"


@pytest.mark.parametrize("text, expected", [
    (GROUP, True),
    ("name: one\nrun: echo hi\n", False),
    ("name: pipeline\n---\nname: a\nrun: echo a\n", False),  # serial: a pipeline
    ("name: g\nexecution: serial\n---\nname: a\nrun: echo a\n", False),
    ("name: g\nexecution: parallel\n", True),  # a header alone: its loader says what lacks
    ("name: g\nexecution: parallel\n---\nname: a\nrun: [unclosed\n", True),
])  # fmt: skip
def test_a_group_file_is_one_whose_header_says_parallel(
    tmp_path: Path, text: str, expected: bool
) -> None:
    assert is_group_file(write(tmp_path, text)) is expected


def test_every_error_of_every_document_at_once_at_its_line(
    tmp_path: Path, gpujob: Callable
) -> None:
    path = write(tmp_path, (
        "name: bad group\n"            # 1
        "execution: parallel\n"
        "primary_tasks: [nope]\n"      # 3
        "placement: SAME_INFRA\n"      # 4: warned, ignored
        "---\n"
        "name: a\n"
        "resources:\n"
        "  cpus: lots\n"               # 8
        "run: echo a\n"
        "bogus: 1\n"                   # 10
        "---\n"
        "name: a\n"                    # 12
        "run: echo b\n"
        "---\n"
        "name: c\n"
        "termination_delay: 5\n"       # 16: a header key in a task
        "run: echo c\n"
    ))  # fmt: skip
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("gpujob: error:")]
    lines = [int(re.match(rf"gpujob: error: {path}:(\d+):", e)[1]) for e in errors]  # type: ignore[index]
    assert lines == [1, 3, 8, 10, 12, 16], result.stderr
    assert "a second task named `a`" in errors[4]
    assert "no task `nope` in this group; its tasks: a, c" in errors[1]
    assert f"{path}:4: placement: not a job group header key" in result.stderr


@pytest.mark.parametrize("header, line, message", [
    ("primary_tasks: trainer\n", 3, "primary_tasks: a list of the group's task names"),
    ("termination_delay: soon\n", 3, "termination_delay: a duration such as 30s"),
    ("termination_delay: {other: 5s}\n", 3, "termination_delay: no task `other`"),
])  # fmt: skip
def test_header_mistakes_name_their_line(
    tmp_path: Path, gpujob: Callable, header: str, line: int, message: str
) -> None:
    path = write(tmp_path, f"name: g\nexecution: parallel\n{header}---\nname: a\nrun: echo a\n")
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 2
    assert f"gpujob: error: {path}:{line}: {message}" in result.stderr


def test_the_dry_run_shows_each_tasks_plan_with_the_addresses(
    tmp_path: Path, gpujob: Callable
) -> None:
    path = write(tmp_path, GROUP.replace("num_nodes: 2\n", ""))
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "task trainer (primary):" in result.stderr
    assert "task reward-server (auxiliary (stopped 120s after the primary tasks end)):" in (
        result.stderr)  # fmt: skip
    for job in ("trainer", "reward-server"):  # each task's own plan, its own run script
        assert re.search(rf"^job {job}-\S+: {job} on local", result.stdout, re.M), result.stdout
    assert result.stdout.count("export SKYPILOT_JOBGROUP_HOST_REWARD_SERVER=127.0.0.1") == 2
    assert result.stdout.count("export SKYPILOT_JOBGROUP_NAME=rl") == 2
    assert "python3 -m http.server 8002" in result.stdout


def test_on_hosts_must_give_one_per_node_in_task_order(tmp_path: Path, gpujob: Callable) -> None:
    result = gpujob("submit", str(write(tmp_path, GROUP)), "--dry-run", "--on", "h1,h2")
    assert result.exit_code == 2
    assert "--on gives 2 host(s); the group's tasks need 3 (trainer: 2, reward-server: 1)" in (
        result.stderr)  # fmt: skip


@pytest.mark.parametrize("flags, refused", [
    (("--up", "a100"), "--up"), (("--ladder", "1,2"), "--ladder"), (("--job-id", "x"), "--job-id"),
])  # fmt: skip
def test_what_a_group_does_not_take_yet_is_one_line(
    tmp_path: Path, gpujob: Callable, flags: tuple[str, ...], refused: str
) -> None:
    result = gpujob("submit", str(write(tmp_path, GROUP)), "--dry-run", *flags)
    assert result.exit_code == 2
    assert f"gpujob: error: {refused} is not supported for a job group yet" in result.stderr


def job(job_id: str, state: str, code: int | None = None) -> JobRecord:
    return JobRecord(id=job_id, name=job_id, spec_path="g.yaml", provider="local",
                     runtime="bare", hosts=[], node_dirs=["/x"], state=state, exit_code=code,
                     created_at=0.0, ended_at=None, last_line=None)  # fmt: skip


RECORD = GroupRecord("g-1", "g", "g.yaml", (Member("trainer", "t", True, 30.0),
                                              Member("data", "d", False, 5.0)), 0.0)  # fmt: skip


@pytest.mark.parametrize("trainer, data, stop, ended, code", [
    (job("t", "running"), job("d", "running"), (), False, None),
    # every primary task succeeded: the auxiliary one stopped after its delay
    (job("t", "succeeded", 0), job("d", "running"), (("d", 5.0),), False, None),
    # a primary task failed: the auxiliary one stopped at once; the group fails with its code
    (job("t", "failed", 3), job("d", "running"), (("d", 0.0),), False, None),
    (job("t", "failed", 3), job("d", "cancelled", 143), (), True, 3),
    (job("t", "succeeded", 0), job("d", "cancelled", 143), (), True, 0),
    # an auxiliary task that fails does not stop a primary one (SkyPilot's rule)
    (job("t", "running"), job("d", "failed", 1), (), False, None),
])  # fmt: skip
def test_skypilots_end_rule(
    trainer: JobRecord, data: JobRecord, stop: tuple, ended: bool, code: int | None
) -> None:
    decision = decide(RECORD, {"t": trainer, "d": data})
    assert (decision.stop, decision.ended, decision.exit_code) == (stop, ended, code)


def test_without_primary_tasks_a_failed_task_leaves_the_others_running() -> None:
    record = GroupRecord("g-1", "g", "g.yaml", (Member("a", "a", True, 0.0),
                                                  Member("b", "b", True, 0.0)), 0.0)  # fmt: skip
    decision = decide(record, {"a": job("a", "failed", 1), "b": job("b", "running")})
    assert (decision.stop, decision.ended) == ((), False)
    decision = decide(record, {"a": job("a", "failed", 1), "b": job("b", "succeeded", 0)})
    assert (decision.ended, decision.exit_code) == (True, 1)


def test_skypilots_host_names_in_a_run_block_are_said_with_the_variable_to_use(
    tmp_path: Path, gpujob: Callable
) -> None:
    path = write(tmp_path, (
        "name: rl\nexecution: parallel\n---\nname: data-server\nrun: python serve.py\n---\n"
        "name: trainer\n"
        "run: |\n"                                                   # 8
        "  python train.py --data data-server-0.${SKYPILOT_JOBGROUP_NAME}:8000 \\\n"
        "    --peer data-server-1.rl:8000 --other rl-0.rl\n"
    ))  # fmt: skip
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "SkyPilot's host name" in line]
    assert warned == [
        f"gpujob: warning: {path}:8: run: `data-server-0.${{SKYPILOT_JOBGROUP_NAME}}` is "
        "SkyPilot's host name, resolved only by the /etc/hosts entries SkyPilot writes on its "
        "clusters; gpujob writes none: use $SKYPILOT_JOBGROUP_HOST_DATA_SERVER",
        f"gpujob: warning: {path}:8: run: `data-server-1.rl` is SkyPilot's host name, resolved "
        "only by the /etc/hosts entries SkyPilot writes on its clusters; gpujob writes none: "
        "use its node's address",
    ]


@pytest.mark.parametrize("text, line, message", [
    ("name: g\nexecution: parallel\n", 1, "a job group needs at least one task document"),
    ("name: g\nexecution: parallel\n---\nname: a\nrun: echo a\n---\nname: b\nrun: [x\n",
     9, "YAML syntax error"),  # the stream ends inside the list opened at line 8
])  # fmt: skip
def test_a_broken_group_is_reported_as_a_group_at_its_line(
    tmp_path: Path, gpujob: Callable, text: str, line: int, message: str
) -> None:
    path = write(tmp_path, text)
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"gpujob: error: {path}:{line}"), result.stderr
    assert message in result.stderr


def test_a_later_tasks_refusal_comes_before_any_task_starts(
    tmp_path: Path, gpujob: Callable
) -> None:
    path = write(tmp_path, "name: g\nexecution: parallel\n---\nname: a\nrun: echo a\n---\n"
                           "name: b\nworkdir: missing\nrun: echo b\n")  # fmt: skip
    result = gpujob("submit", str(path))  # not a dry run: the fixture fails any start
    assert result.exit_code == 2, result.stderr
    assert f"gpujob: error: {path}:8: workdir: " in result.stderr
    assert "is not a folder" in result.stderr


def test_the_json_dry_run_is_one_document_of_every_tasks_plan(
    tmp_path: Path, gpujob: Callable
) -> None:
    import json

    result = gpujob("submit", str(write(tmp_path, GROUP.replace("num_nodes: 2\n", ""))),
                    "--dry-run", "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["group"] == "rl"
    assert [(t["task"], t["primary"]) for t in shown["tasks"]] == [
        ("trainer", True), ("reward-server", False)]  # fmt: skip
    assert "SKYPILOT_JOBGROUP_HOST_TRAINER=127.0.0.1" in json.dumps(shown["tasks"][1]["plan"])


def test_an_empty_document_is_skipped_as_skypilot_skips_it(tmp_path: Path) -> None:
    group = read_group(write(tmp_path, GROUP + "---\n"))
    assert [t.name for t in group.tasks] == ["trainer", "reward-server"] and not group.errors
