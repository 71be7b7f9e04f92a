"""The recovery controller's decisions (launcher/plan/recovery.py), table by table: what a
poll of the nodes' hosts calls for, with no cloud and no SSH."""

from __future__ import annotations

import pytest

from launcher.plan.recovery import (
    Finished,
    NodeSeen,
    Policy,
    Recover,
    Stop,
    Unreachable,
    Watch,
    decide,
    rent_delay_s,
)

NOW = 1000.0
POLICY = Policy(max_restarts=3, on=("host_lost", "preempted"), unreachable_after_s=60)


def node(rank: int = 0, **seen: object) -> NodeSeen:
    return NodeSeen(rank=rank, host=f"h{rank}", **seen)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([node(state="running")], Watch()),
        ([node(state="unknown")], Watch()),
        ([node(state="succeeded", exit_code=0)], Finished("succeeded", 0)),
        ([node(state="cancelled", exit_code=143)], Finished("cancelled", 143)),
        ([node(state="timed out", exit_code=124)], Finished("timed out", 124)),
        ([node(state="running", verdict="host_lost", reason="terminated")],
         Recover("host_lost", "h0", 0, "terminated")),
        ([node(verdict="preempted", reason="outbid", unreachable_since=NOW)],
         Recover("preempted", "h0", 0, "outbid")),
        ([node(unreachable_since=NOW - 61)],
         Recover("host_lost", "h0", 0, "no SSH answer for 61 s")),
        ([node(state="lost", reason="supervisor gone")],
         Recover("host_lost", "h0", 0, "supervisor gone")),
    ],
    ids=["running", "starting", "succeeded", "cancelled", "timed-out", "cloud-says-gone",
         "outbid", "silent-past-window", "agent-lost"],
)  # fmt: skip
def test_one_node(nodes: list[NodeSeen], expected: object) -> None:
    assert decide(POLICY, 0, nodes, NOW) == expected


def test_a_silent_host_within_its_window_is_waited_for() -> None:
    seen = decide(POLICY, 0, [node(unreachable_since=NOW - 20)], NOW)
    assert isinstance(seen, Watch) and "lost in 40 s" in seen.note


def test_a_survivor_failing_for_a_vanished_peer_waits_for_the_peers_verdict() -> None:
    """Two nodes: node 1's host went silent and node 0 failed for want of its peer. The
    failure is not the program's until node 1's window has passed: then it is node 1's
    host that was lost, and the whole job restarts."""
    survivor = node(0, state="failed", exit_code=1)
    silent = node(1, unreachable_since=NOW - 10)
    assert isinstance(decide(POLICY, 0, [survivor, silent], NOW), Watch)
    later = decide(POLICY, 0, [survivor, silent], NOW + 55)
    assert later == Recover("host_lost", "h1", 1, "no SSH answer for 65 s")


def test_the_clouds_verdict_on_node_1_comes_before_node_0s_failure() -> None:
    nodes = [node(0, state="failed", exit_code=1), node(1, verdict="host_lost", reason="gone")]
    assert decide(POLICY, 1, nodes, NOW) == Recover("host_lost", "h1", 1, "gone")


def test_a_cancel_is_never_recovered_even_where_the_peer_failed_for_it() -> None:
    """`gpujob cancel` reaches node 0 first; node 1 fails for want of its peer before its own
    cancel lands. With node_failure listed, that failure is still the user's cancel."""
    policy = Policy(on=("host_lost", "preempted", "node_failure"))
    nodes = [node(0, state="cancelled", exit_code=143), node(1, state="failed", exit_code=1)]
    assert decide(policy, 0, nodes, NOW) == Finished("cancelled", 143)


@pytest.mark.parametrize(
    ("on", "expected"),
    [
        (("host_lost", "preempted"), Stop),
        (("host_lost", "node_failure"), Recover),
    ],
)
def test_a_programs_failure_restarts_only_when_listed(on: tuple[str, ...], expected: type) -> None:
    policy = Policy(max_restarts=3, on=on)
    decision = decide(policy, 0, [node(state="failed", exit_code=3)], NOW)
    assert isinstance(decision, expected)
    if isinstance(decision, Stop):
        assert decision.exit_code == 3
        assert "node_failure on node 0 (h0: exit code 3)" in decision.why
        assert "restarts on: host_lost, preempted" in decision.why


def test_an_event_not_listed_stops() -> None:
    policy = Policy(on=("host_lost",))
    decision = decide(policy, 0, [node(state="running", verdict="preempted", reason="bid")], NOW)
    assert isinstance(decision, Stop) and "preempted on node 0 (h0: bid)" in decision.why


@pytest.mark.parametrize(("restarts", "stops"), [(0, False), (1, False), (2, True), (5, True)])
def test_max_restarts_bounds_the_restarts(restarts: int, stops: bool) -> None:
    policy = Policy(max_restarts=2)
    decision = decide(policy, restarts, [node(verdict="host_lost", reason="gone")], NOW)
    if stops:
        assert isinstance(decision, Stop)
        assert decision.why.startswith("max_restarts (2) used up: host_lost on node 0")
    else:
        assert decision == Recover("host_lost", "h0", 0, "gone")


def test_no_restarts_allowed_stops_at_the_first_loss() -> None:
    decision = decide(Policy(max_restarts=0), 0, [node(verdict="host_lost")], NOW)
    assert isinstance(decision, Stop)


def test_a_node_that_succeeded_before_its_host_went_is_not_a_loss() -> None:
    nodes = [node(0, state="succeeded", exit_code=0, verdict="host_lost")]
    assert decide(POLICY, 0, nodes, NOW) == Finished("succeeded", 0)


def test_the_recovery_line_says_attempt_why_host_and_step() -> None:
    line = Recover("host_lost", "gpujob-x", 0, "terminated").line(1, 3, 40)
    assert line == ("recovering (attempt 2, restart 1/3, host_lost: gpujob-x (terminated), "
                    "from step 40)")  # fmt: skip
    assert "from the start" in Recover("preempted", "h", 0).line(1, 3, None)


def test_unreachable_remembers_since_when_and_forgets_on_an_answer() -> None:
    memory = Unreachable()
    assert memory.seen(0, answered=False, now=10) == 10
    assert memory.seen(0, answered=False, now=20) == 10
    assert memory.seen(0, answered=True, now=30) is None
    assert memory.seen(0, answered=False, now=40) == 40


@pytest.mark.parametrize(("made", "delay"), [(1, 2.0), (2, 4.0), (3, None)])
def test_renting_again_is_retried_a_bounded_number_of_times(made: int, delay: float | None) -> None:
    assert rent_delay_s(Policy(rent_tries=3), made, 2.0) == delay


def test_recovery_without_a_sync_target_is_refused_naming_its_line(tmp_path) -> None:
    """On rented hosts (a restart on a fresh host resumes from S3); SLURM's requeue resumes
    from the cluster's shared filesystem and needs neither S3 nor a rental."""
    from launcher.errors import UsageError
    from launcher.jobs.launch import policy_for
    from launcher.spec.load import load_job_spec
    from launcher.targets.base import LaunchRequest

    (tmp_path / "w").mkdir()
    spec = tmp_path / "job.yaml"
    recovery = "recovery: {max_restarts: 2, on_events: [node_failure, host_lost]}\n"
    spec.write_text(f"name: t\nimage: host\nworkdir: w\nrun: {{entrypoint: t.py}}\n{recovery}")
    loaded = load_job_spec(spec)
    with pytest.raises(UsageError) as refused:
        policy_for(LaunchRequest(str(spec), up="a100"), loaded)
    assert f"{spec}:5: recovery needs checkpoints.sync_to" in refused.value.message
    requeued = policy_for(LaunchRequest(str(spec), on=("slurm:hpc",)), loaded, requeues=True)
    assert requeued == Policy(max_restarts=2, on=("host_lost", "node_failure"))
    spec.write_text(spec.read_text() + "checkpoints: {sync_to: 'lab:runs/t'}\n")
    recovery = load_job_spec(spec).spec.recovery
    assert recovery is not None
    assert (recovery.max_restarts, recovery.on_events) == (2, ["host_lost", "node_failure"])
    assert recovery.unreachable_after == 120.0


def test_status_json_says_recovering_and_the_table_the_recovery_line() -> None:
    """`status --json` keeps `state` a word scripts compare; the line is in `recovery`."""
    from launcher.commands.status import recovery_text

    note = {"phase": "recovering", "restarts": 0, "max_restarts": 3, "controller_pid": 42,
            "line": "recovering (attempt 2, restart 1/3, host_lost: h0, from step 40)"}  # fmt: skip
    assert recovery_text(note) == f"{note['line']}; controller pid 42"
    watching = dict(note, phase="watching", restarts=1, controller_pid=None)
    assert recovery_text(watching) == "no controller (`gpujob recover JOB`), 1/3 restarts"


def test_a_cancel_while_the_hosts_are_replaced_is_recorded_and_ends_the_recovery(gpujob) -> None:
    """The old hosts are gone and the new ones not yet started: no agent to ask. The cancel
    is recorded; the controller (which reads `over`) makes no restart; `status` says so."""
    import json
    import time

    from launcher.remote.hosts import HostEntry
    from launcher.state.db import JobRecord, StateDB
    from launcher.state.recovery import RECOVERING, RecoveryDB

    StateDB().add_job(JobRecord(
        id="rec-1", name="qs", spec_path="qs.yaml", provider="lambda", runtime="docker",
        hosts=[HostEntry(name="gone", address="192.0.2.1").to_record()],
        node_dirs=["/root/.gpujob/jobs/rec-1/node-0"], state="recovering", exit_code=None,
        created_at=time.time(), ended_at=None, last_line=None))  # fmt: skip
    rdb = RecoveryDB()
    rdb.add("rec-1", {"policy": {}}, 3)
    rdb.update("rec-1", phase=RECOVERING)

    done = gpujob("cancel", "rec-1")
    assert done.exit_code == 0, done.stderr
    assert "job rec-1 cancelled: it was being recovered" in done.stderr
    record = rdb.get("rec-1")
    assert record is not None and record.over
    assert StateDB().job("rec-1").state == "cancelled"  # type: ignore[union-attr]
    shown = gpujob("status", "--json")
    (row,) = [r for r in json.loads(shown.stdout)["jobs"] if r["id"] == "rec-1"]
    assert row["state"] == "cancelled" and row["recovery"]["phase"] == "stopped"
