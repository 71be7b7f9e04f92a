"""Time and GPU-idle limits (`max_duration`, `resources.idle_gpu`): the idle tracker's
decisions from samples, durations as written and shown, what a plan writes for the agent
and what its dry run says, bad values as one-line errors, and the agent's limit thread
driven with a stand-in GPU query (a real `nvidia-smi` stand-in on PATH where it asks one)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from planning import plan_of, spec_of, written

from launcher.agent.limits import (
    ACT,
    BUSY,
    WARN,
    GpuQueryFailed,
    IdleTracker,
    Limits,
    LimitWatch,
    checkpoint_note,
    parse_utilization,
    query_gpus,
)
from launcher.spec.limits import parse_duration, show_duration

IDLE, BUSY_GPU = {0: 0.0, 1: 3.0}, {0: 0.0, 1: 60.0}


@pytest.mark.parametrize(
    ("tracker", "samples", "decisions"),
    [
        pytest.param(  # every GPU under for the window: one warning, not one per sample
            IdleTracker(5, warn_after_s=10),
            [(0, IDLE), (5, IDLE), (10, IDLE), (15, IDLE)],
            [None, None, WARN, None],
            id="all-idle-warns-once-after-the-window",
        ),
        pytest.param(  # one busy GPU starts the window again
            IdleTracker(5, warn_after_s=10),
            [(0, IDLE), (8, BUSY_GPU), (12, IDLE), (20, IDLE), (22, IDLE)],
            [None, None, None, None, WARN],
            id="one-busy-gpu-resets-the-window",
        ),
        pytest.param(  # the warning clears when a GPU works again, and may come back
            IdleTracker(5, warn_after_s=10),
            [(0, IDLE), (10, IDLE), (11, BUSY_GPU), (12, BUSY_GPU), (13, IDLE), (23, IDLE)],
            [None, WARN, BUSY, None, None, WARN],
            id="warning-clears-when-busy-again",
        ),
        pytest.param(  # action stop: warned at half the window, acted on at its end
            IdleTracker(5, warn_after_s=5, act_after_s=10),
            [(0, IDLE), (5, IDLE), (9, IDLE), (10, IDLE), (30, IDLE)],
            [None, WARN, None, ACT, None],
            id="stop-warns-at-half-then-acts",
        ),
        pytest.param(  # exactly at the threshold is busy (`under` below_percent)
            IdleTracker(5, warn_after_s=1),
            [(0, {0: 5.0}), (2, {0: 5.0})],
            [None, None],
            id="at-the-threshold-is-busy",
        ),
        pytest.param(  # a sample without GPUs (nothing reported) decides nothing
            IdleTracker(5, warn_after_s=1),
            [(0, {}), (5, {})],
            [None, None],
            id="no-gpus-no-decision",
        ),
    ],
)
def test_idle_tracker_decides_from_samples(
    tracker: IdleTracker, samples: list[tuple[float, dict[int, float]]], decisions: list
) -> None:
    assert [tracker.add(now, utilization) for now, utilization in samples] == decisions


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("0, 87\n1, 0\n", {0: 87.0, 1: 0.0}),
        ("0, [N/A]\n1, 12\n", {1: 12.0}),  # MIG/vGPU rows without a figure are left out
        ("No devices were found\n", {}),
    ],
)
def test_nvidia_smi_rows_parse(text: str, parsed: dict[int, float]) -> None:
    assert parse_utilization(text) == parsed


@pytest.mark.parametrize(
    ("written_as", "seconds", "shown"),
    [("30m", 1800, "30m"), ("2h", 7200, "2h"), ("90", 90, "90s"), (90, 90, "90s"),
     ("1.5h", 5400, "90m"), ("1d", 86400, "1d"), ("45s", 45, "45s"), (0.5, 0.5, "0.5s")],
)  # fmt: skip
def test_durations_read_and_shown(written_as: object, seconds: float, shown: str) -> None:
    assert parse_duration(written_as) == seconds
    assert show_duration(seconds) == shown
    assert parse_duration(show_duration(seconds)) == seconds


def test_the_plan_hands_the_limits_to_every_agent() -> None:
    spec = spec_of(
        nodes=2,
        max_duration="30m",
        resources={"idle_gpu": {"below_percent": 10, "minutes": 20, "action": "stop"}},
    )
    plan = plan_of(spec)
    for node in plan.nodes:
        config = json.loads(written(node, "job.json").content)
        assert config["max_duration_s"] == 1800
        assert config["idle_gpu"] == {"below_percent": 10, "minutes": 20, "action": "stop"}
    plain = json.loads(written(plan_of(spec_of()).nodes[0], "job.json").content)
    assert "max_duration_s" not in plain and "idle_gpu" not in plain


@pytest.fixture
def host_job(tmp_path: Path) -> Callable[..., Path]:
    """A spec for the host's Python in tmp_path, extra lines appended."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")

    def write(*extra: str) -> Path:
        spec = tmp_path / "job.yaml"
        lines = ["name: t", "image: host", "workdir: work", "run:", "  entrypoint: train.py"]
        spec.write_text("\n".join([*lines, *extra]) + "\n")
        return spec

    return write


def test_the_dry_run_says_each_limit_in_one_line(
    gpujob: Callable, host_job: Callable[..., Path]
) -> None:
    spec = host_job("max_duration: 30m", "resources:",
                    "  idle_gpu: {below_percent: 5, minutes: 10, action: stop}")  # fmt: skip
    result = gpujob("submit", str(spec), "--dry-run", "--job-id", "lim")
    assert (result.exit_code, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert (
        "time limit: 30m (max_duration), then SIGTERM, 30 s grace, checkpoints kept on the "
        "host; the job ends `timed out` (exit code 124)"
    ) in lines
    assert (
        "GPU idle: every GPU of the host under 5% for 10m (resources.idle_gpu, from "
        "nvidia-smi): warned at half of it, then SIGTERM, 30 s grace; the job ends `failed`"
    ) in lines
    warn = gpujob("submit", str(host_job("resources: {idle_gpu: {minutes: 0.25}}")), "--dry-run")
    assert "(resources.idle_gpu, from nvidia-smi): a warning in the log and `gpujob status`" in (
        warn.stdout
    )
    assert "time limit" not in warn.stdout
    plain = gpujob("submit", str(host_job()), "--dry-run", "--json")
    assert json.loads(plain.stdout)["limits"] is None


@pytest.mark.parametrize(
    ("lines", "line", "field", "says"),
    [
        (["max_duration: 30x"], 6, "max_duration:", "text like `30m`, `2h`, `1d` (got '30x')"),
        (["max_duration: 0"], 6, "max_duration:", "a duration must be above zero"),
        (["max_duration: true"], 6, "max_duration:", "a duration is a number of seconds"),
        (["resources:", "  idle_gpu: {minutes: 0}"], 7, "resources.idle_gpu.minutes:",
         "greater than 0"),
        (["resources:", "  idle_gpu: {minutes: 5, action: kill}"], 7,
         "resources.idle_gpu.action:", "'warn' or 'stop'"),
        (["resources:", "  idle_gpu: {minutes: 5, below_percent: 150}"], 7,
         "resources.idle_gpu.below_percent:", "less than or equal to 100"),
    ],
)  # fmt: skip
def test_a_bad_limit_is_one_line_naming_file_line_and_field(
    gpujob: Callable,
    host_job: Callable[..., Path],
    lines: list[str],
    line: int,
    field: str,
    says: str,
) -> None:
    spec = host_job(*lines)
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert result.stdout == ""
    said = result.stderr.splitlines()
    assert len(said) == 1, result.stderr
    assert said[0].startswith(f"gpujob: error: {spec}:{line}: {field}"), said[0]
    assert says in said[0], said[0]


class Agent:
    """What LimitWatch asks of the agent, recorded: log lines, status updates, stops."""

    def __init__(
        self,
        samples: list[dict[int, float]] | None = None,
        ending: bool = False,
        once: bool = False,
    ) -> None:
        """`once`: the job ends after the last sample (else the last one repeats)."""
        self.lines: list[str] = []
        self.status: dict = {}
        self.stops: list[float] = []
        self.samples = list(samples or [])
        self.is_ending = ending
        self.once = once
        self.job_ended = threading.Event()

    def publish(self, update: dict) -> None:
        self.status.update(update)

    def query(self) -> dict[int, float]:
        if not self.samples:
            raise GpuQueryFailed("nvidia-smi is not installed on this host")
        if self.once and len(self.samples) == 1:
            self.job_ended.set()
        return self.samples.pop(0) if len(self.samples) > 1 else self.samples[0]

    def run(self, config: dict, clock: Callable[[], float] = time.monotonic) -> None:
        """The watch in a thread, as the agent runs it, until it is done on its own."""
        watch = LimitWatch(Limits.from_config(config), self.lines.append, self.publish,
                           self.stops.append, lambda: self.is_ending, self.query,
                           clock)  # fmt: skip
        thread = threading.Thread(target=watch.run, args=(self.job_ended,))
        thread.start()
        thread.join(30)
        assert not thread.is_alive(), "the limit watch did not finish"


def test_the_time_limit_says_so_then_stops_the_job_with_its_grace() -> None:
    agent = Agent()
    agent.run({"max_duration_s": 0.2, "grace_s": 7})
    assert agent.lines == [
        "time limit 0.2s reached (max_duration): stopping the job (SIGTERM, grace 7 s)"
    ]
    assert agent.stops == [7.0]
    assert agent.status["timed_out"] == "0.2s"
    assert agent.status["time_limit"]["max_duration_s"] == 0.2


def test_the_time_limit_leaves_a_job_already_being_stopped_alone() -> None:
    agent = Agent(ending=True)  # a cancel (or the disk care) came first
    agent.run({"max_duration_s": 0.1})
    assert (agent.lines, agent.stops, "timed_out" in agent.status) == ([], [], False)


def test_no_nvidia_smi_turns_the_idle_policy_off_in_one_line() -> None:
    agent = Agent(samples=[])
    agent.run({"idle_gpu": {"below_percent": 5, "minutes": 0.01, "action": "stop"}})
    assert agent.lines == [
        "GPU idle policy (resources.idle_gpu) is off: nvidia-smi is not installed on this host"
    ]
    assert agent.stops == []
    assert agent.status["gpu_idle"] == {"off": "nvidia-smi is not installed on this host"}


def test_idle_gpus_are_warned_about_then_the_job_is_stopped() -> None:
    """A clock that moves 1 s per look: the samples fall at 2, 4, 6, 8 s, with no waiting."""
    agent = Agent(samples=[{0: 0.0, 1: 2.0}])  # a job that holds its GPUs and sleeps
    ticks = itertools.count(0.0, 1.0)
    policy = {"below_percent": 5, "minutes": 0.1, "action": "stop"}  # 6 s; warned at 3 s
    agent.run({"idle_gpu": policy, "grace_s": 9}, clock=lambda: next(ticks))
    assert agent.lines[0] == (
        "GPU idle warning: every GPU under 5% for 4s (resources.idle_gpu); it is stopped at "
        "6s idle (action: stop)"
    )
    reason = "stopped by gpujob: every GPU under 5% for 6s (resources.idle_gpu, action: stop)"
    assert agent.lines[1] == f"{reason}; stopping the job (SIGTERM, grace 9 s)"
    assert agent.stops == [9.0]
    assert agent.status["stopped_reason"] == reason
    assert "GPUs idle (every GPU under 5%) since" in agent.status["gpu_idle"]["warning"]


def test_an_idle_warning_clears_when_a_gpu_works_again() -> None:
    samples = [IDLE, IDLE, IDLE, BUSY_GPU, BUSY_GPU]  # at 2, 4, 6, 8, 10 s
    agent = Agent(samples=samples, once=True)
    seen = []
    agent.publish = lambda update: (agent.status.update(update), seen.append(dict(update)))
    ticks = itertools.count(0.0, 1.0)
    agent.run({"idle_gpu": {"below_percent": 5, "minutes": 0.05}}, clock=lambda: next(ticks))
    assert agent.lines == [
        "GPU idle warning: every GPU under 5% for 4s (resources.idle_gpu); the job goes on "
        "(action: warn)",
        "GPU 1 busy again (60%): idle warning cleared",
    ]
    warned = [u["gpu_idle"] for u in seen if u.get("gpu_idle")]
    assert len(warned) == 1 and warned[0]["warning"].startswith("GPUs idle (every GPU under 5%)")
    assert agent.status["gpu_idle"] is None  # what `gpujob status` shows once it cleared
    assert agent.stops == []


@pytest.mark.parametrize(
    ("status", "care", "note"),
    [
        ({}, None, ""),
        ({}, {"sync_remote": None}, "; no complete checkpoint was saved"),
        ({"checkpoints": {"latest": "checkpoint-140"}}, {"sync_remote": None},
         "; last checkpoint: step 140 (checkpoint-140) on the host (no checkpoints.sync_to)"),
        ({"checkpoints": {"latest": "checkpoint-140"}, "sync": {"synced": ["checkpoint-140"]}},
         {"sync_remote": "t:qs"}, "; last checkpoint: step 140 (checkpoint-140), synced to t:qs"),
        ({"checkpoints": {"latest": "step_7"}, "sync": {"synced": ["step_5"]}},
         {"sync_remote": "t:qs"},
         "; last checkpoint: step 7 (step_7), NOT synced to t:qs (see the log)"),
    ],
)  # fmt: skip
def test_a_timed_out_node_names_its_last_checkpoint(status: dict, care: dict, note: str) -> None:
    assert checkpoint_note(status, care) == note


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable]:
    """`nvidia-smi` on PATH: a script that prints `output` and exits with `code`."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))

    def install(output: str | None, code: int = 0) -> None:
        if output is None:
            (folder / "nvidia-smi").unlink(missing_ok=True)
            return
        script = folder / "nvidia-smi"
        script.write_text(f"#!/bin/sh\nprintf '%s' '{output}'\nexit {code}\n")
        script.chmod(0o755)

    yield install


def test_query_gpus_reads_nvidia_smi_or_says_why_not(fake_nvidia_smi: Callable) -> None:
    fake_nvidia_smi("0, 3\n1, 97\n")
    assert query_gpus() == {0: 3.0, 1: 97.0}
    fake_nvidia_smi(
        "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.\n", 9
    )
    with pytest.raises(GpuQueryFailed, match="nvidia-smi failed: NVIDIA-SMI has failed"):
        query_gpus()
    fake_nvidia_smi(None)
    with pytest.raises(GpuQueryFailed, match="nvidia-smi is not installed on this host"):
        query_gpus()
