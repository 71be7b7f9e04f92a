"""`submit --ladder`: rungs parsed, each rung's layout and batch arithmetic planned (every rung
that cannot divide named before anything runs), a failed rung's cause read from real output
(tests/data/ladder: torchrun runs of this machine), the throughput and memory cells."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.errors import ManyUsageErrors, UsageError
from launcher.jobs.ladder_cause import classify, per_rank, throughput
from launcher.jobs.ladder_stop import first_checkpoint
from launcher.plan.ladder import parse_rungs, plan_ladder
from launcher.spec.job import JobSpec
from tests.conftest import Result

DATA = Path(__file__).resolve().parents[1] / "data" / "ladder"
REPO = Path(__file__).resolve().parents[2]


def spec(**fields: object) -> JobSpec:
    base: dict[str, object] = {"name": "lad", "image": "host", "run": {"entrypoint": "t.py"}}
    return JobSpec.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1,2,4", (False, [1, 2, 4])), (" 1, 8 ", (False, [1, 8])), ("nodes:1,2", (True, [1, 2])),
     ("4", (False, [4]))],
)  # fmt: skip
def test_rungs_are_parsed(text: str, expected: tuple[bool, list[int]]) -> None:
    assert parse_rungs(text) == expected


@pytest.mark.parametrize(
    ("text", "said"),
    [("1,x", "--ladder 1,x: `x` is not a whole number of 1 or more"),
     ("", "--ladder : `` is not a whole number"), ("0,1", "`0` is not a whole number"),
     ("4,2", "--ladder 4,2: a ladder goes up"), ("2,2", "a ladder goes up"),
     ("nodes:", "is not a whole number"), (",".join(map(str, range(1, 18))), "at most 16")],
)  # fmt: skip
def test_bad_rungs_are_one_clear_line(text: str, said: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_rungs(text)
    assert said in err.value.message
    assert "\n" not in err.value.message


def layouts(job: JobSpec, text: str) -> list[tuple[int, int, int, str | None]]:
    return [(r.world, r.nodes, r.nproc_per_node, r.gpu) for r in plan_ladder(job, text, 5).rungs]


def test_world_sizes_on_one_node_take_that_many_processes_and_gpus() -> None:
    job = spec(resources={"accelerators": "H100:8"})
    assert layouts(job, "1,4,8") == [(1, 1, 1, "H100:1"), (4, 1, 4, "H100:4"), (8, 1, 8, "H100:8")]
    assert layouts(spec(run={"entrypoint": "t.py", "nproc_per_node": 2}), "1,2,4") == [
        (1, 1, 1, None), (2, 1, 2, None), (4, 1, 4, None)]  # fmt: skip


def test_a_multi_node_spec_keeps_its_processes_per_node() -> None:
    job = spec(nodes=2, resources={"accelerators": "A100:4"})
    assert layouts(job, "2,4,8") == [(2, 1, 2, "A100:2"), (4, 1, 4, "A100:4"), (8, 2, 4, "A100:4")]
    assert layouts(job, "nodes:1,2,3") == [(4, 1, 4, "A100:4"), (8, 2, 4, "A100:4"),
                                           (12, 3, 4, "A100:4")]  # fmt: skip
    with pytest.raises(UsageError, match="rung 6: world size 6 is not a multiple of the spec's 4"):
        plan_ladder(job, "2,6", 5)


def test_one_process_per_node_launchers_climb_in_nodes() -> None:
    job = spec(run={"entrypoint": "t.py", "launcher": "none"})
    assert layouts(job, "1,2") == [(1, 1, 1, None), (2, 2, 1, None)]


def test_each_rungs_batch_is_rechecked_and_every_rung_that_cannot_divide_is_named() -> None:
    job = spec(run={"entrypoint": "t.py", "nproc_per_node": 2},
               batch={"global_batch": 16, "micro_batch": 4})  # fmt: skip
    plan = plan_ladder(job, "1,2,4", 7, "job.yaml:16")
    assert [r.grad_accum_steps for r in plan.rungs] == [4, 2, 1]
    assert plan.steps == 7
    with pytest.raises(ManyUsageErrors) as err:
        plan_ladder(job, "1,3,5,8", 7, "job.yaml:16")
    lines = err.value.messages
    assert [line.split(":")[1] for line in lines] == [" rung 3", " rung 5", " rung 8"]
    assert lines[0].startswith("--ladder 1,3,5,8: rung 3: job.yaml:16: 16 / (world_size 3 x ")
    assert "or a world size of 1, 2, 4" in lines[0]


def test_the_dry_run_text_names_each_rungs_job_and_overrides() -> None:
    job = spec(run={"entrypoint": "t.py", "nproc_per_node": 2})
    text = plan_ladder(job, "1,2", 9).text("lad")
    assert "ladder lad: 2 rung(s), each up to 9 steps (GPUJOB_MAX_STEPS)" in text
    assert "  lad-r2  world 2: 1 node(s) x 2 process(es); --set nodes=1 --set " \
        "run.nproc_per_node=2" in text  # fmt: skip


def test_a_rank_refused_memory_by_torchs_allocator_is_named_with_its_lines() -> None:
    cause = classify((DATA / "cpu-allocator.log").read_text(), 1)
    assert cause.line() == "host memory refused (CPU allocator) on rank 3"
    assert any("DefaultCPUAllocator: can't allocate memory" in line for line in cause.lines)
    assert cause.lines[-2:] == ("rank      : 3 (local_rank: 3)", "exitcode  : 1 (pid: 17134)")


def test_a_python_memory_error_is_host_memory() -> None:
    cause = classify((DATA / "memory-error.log").read_text(), 1)
    assert cause.line() == "host memory refused (MemoryError) on rank 1"
    assert "MemoryError" in cause.lines


def test_a_sigkill_is_the_oom_killer_only_with_the_kernels_word() -> None:
    text = (DATA / "sigkill.log").read_text()
    unknown = classify(text, 1, "")
    assert unknown.line() == (
        "SIGKILL (no OOM-killer record readable: dmesg, memory.events) on rank 1"
    )
    dmesg = "[ 812.3] Out of memory: Killed process 21230 (python) total-vm:9000000kB"
    assert classify(text, 137, dmesg).line().startswith("OOM killer (SIGKILL; the kernel: [ 812.3")
    assert classify(text, 1, dmesg, before=dmesg).what.startswith("OOM")  # names rank 1's pid
    events = "/sys/fs/cgroup/memory.events:oom_kill 2"
    assert classify(text, 1, events, before="/sys/fs/cgroup/memory.events:oom_kill 1").what \
        .startswith("OOM")  # fmt: skip
    older = "[ 10.0] Out of memory: Killed process 999 (java)"
    assert classify(text, 1, f"{older}\n{events}", before=f"{older}\n{events}").what.startswith(
        "SIGKILL (no OOM-killer record"
    )  # the host's earlier kills are not this rung's


# What CUDA, the C++ runtime and NCCL print, as PyTorch 2.x writes it (no GPU here to run)
CUDA_OOM = """Traceback (most recent call last):
  File "train.py", line 40, in <module>
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total \
capacity of 79.10 GiB of which 3.44 GiB is free."""
BAD_ALLOC = (
    "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc"
)
NCCL = (
    "[rank1]:[E1127 00:10:00.123456 1234 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
)
OWN = 'Traceback (most recent call last):\n  File "t.py", line 3\nValueError: bad shape (3, 4)'


@pytest.mark.parametrize(
    ("text", "code", "what"),
    [(CUDA_OOM, 1, "CUDA out of memory"), (BAD_ALLOC, 134, "std::bad_alloc"),
     (NCCL, 1, "NCCL timeout"), (OWN, 1, "traceback: ValueError: bad shape (3, 4)"),
     ("nothing said", 3, "exit code 3")],
)  # fmt: skip
def test_each_known_cause_is_told_apart(text: str, code: int, what: str) -> None:
    assert classify(text, code).what == what


def test_the_nccl_rank_comes_from_its_own_marked_lines() -> None:
    assert classify(NCCL, 1).rank == "1"


def test_throughput_is_the_steady_figure_else_the_last_rate() -> None:
    log = "step 5/12 loss 3.1 tokens/s 900\nsteady tokens/s 1234 after 10\nstep 12 tokens/s 5"
    assert throughput(log) == "1234 tokens/s"
    assert throughput("epoch 1: 88.5 samples/s\nepoch 2: 90.2 samples/s") == "90 samples/s"
    assert throughput("no rate here") == "-"
    assert throughput("node 0 step 4/4 samples/s 104") == "104 samples/s"
    saved = (
        "step 10/100000 loss 3.2800 tokens/s 23058\nWriting model shards: 100%|##########| "
        "1/1 [00:00<00:00, 909.24it/s]\ncheckpoint saved: ckpt/checkpoint-10"
    )  # a job that saves with save_pretrained (transformers draws this bar)
    assert throughput(saved) == "23058 tokens/s"
    assert throughput(" 10%|#  | 10/100 [00:05<00:45,  2.00it/s]") == "2 it/s"  # HF Trainer's bar


def test_memory_per_rank_is_in_rank_order() -> None:
    assert per_rank({"10": 3 << 30, "2": 512 << 20}) == "2:512.0M 10:3.0G"
    assert per_rank({}) == "-"


def test_dry_run_prints_the_ladder_then_each_rungs_plan(gpujob: Callable[..., Result]) -> None:
    result = gpujob("submit", str(REPO / "jobs/quickstart.yaml"), "--dry-run", "--ladder",
                    "1,2,4", "--ladder-steps", "5", "--job-id", "lad")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith("ladder lad: 3 rung(s), each up to 5 steps")
    for world in (1, 2, 4):
        assert f"# rung lad-r{world}\njob lad-r{world}: quickstart on local" in out
        assert f"= world size {world}" in out
    assert out.count("GPUJOB_MAX_STEPS=5") == 3


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--ladder-steps", "3"], "--ladder-steps 3 goes with --ladder"),
     (["--ladder", "1,2", "--max-cost", "5"], "--max-cost and --autostop-key-on-host go with"),
     (["--ladder", "1,2", "--detach"], "--ladder with --detach"),
     (["--ladder", "1,3"], "rung 3: "),
     (["--ladder", "nodes:1,4", "--on", "a,b", "--set", "batch.global_batch=32"],
      "--on names 2 hosts but the ladder's top rung (world 8) needs 4 nodes")],
)  # fmt: skip
def test_ladder_refusals_exit_2_in_one_line(
    gpujob: Callable[..., Result], args: list[str], said: str
) -> None:
    result = gpujob("submit", str(REPO / "jobs/quickstart.yaml"), *args)
    assert result.exit_code == 2
    assert said in result.stderr
    assert "Traceback" not in result.stderr


def test_a_one_process_per_node_rung_sets_only_the_node_count() -> None:
    job = spec(run={"entrypoint": "t.py", "launcher": "none"})
    assert [r.sets for r in plan_ladder(job, "1,2", 5).rungs] == [("nodes=1",), ("nodes=2",)]


def test_every_rung_the_spec_refuses_is_named_before_any_runs(
    gpujob: Callable[..., Result], tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: acc\nimage: host\nrun: {entrypoint: t.py, launcher: accelerate}\n")
    result = gpujob("submit", str(job), "--ladder", "1,2,4", "--job-id", "a")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert [line.split(":")[2] for line in lines] == [" rung a-r2", " rung a-r4"], lines
    assert "launcher: accelerate needs GPUs for more than one process (world size 2" in lines[0]


def test_without_ladder_steps_each_rung_ends_at_its_first_checkpoint() -> None:
    job = spec(run={"entrypoint": "t.py", "nproc_per_node": 2})
    plan = plan_ladder(job, "1,2", None)
    assert plan.until_checkpoint and not plan_ladder(job, "1,2", 9).until_checkpoint
    assert "ladder lad: 2 rung(s), each until its first complete checkpoint (or its own end)" \
        in plan.text("lad")  # fmt: skip


RUNNING = {"state": "running"}
SAVED = {"state": "running", "checkpoints": {"complete": ["checkpoint-5", "checkpoint-10"],
                                             "latest": "checkpoint-10"}}  # fmt: skip


@pytest.mark.parametrize(
    ("statuses", "found"),
    [([RUNNING, RUNNING], None), ([None, RUNNING], None), ([RUNNING, SAVED], (1, "checkpoint-5")),
     ([SAVED], (0, "checkpoint-5")),
     ([{"state": "running", "checkpoints": {"complete": [], "latest": "step_3"}}], (0, "step_3")),
     ([SAVED, {"state": "failed", "exit_code": 1}], None),  # a failing rung fails
     ([SAVED, {"state": "lost"}], None),
     ([{**SAVED, "state": "succeeded"}], None),  # it ended: nothing to stop
     ([{**SAVED, "state": "succeeded"}, SAVED], (0, "checkpoint-5"))],
)  # fmt: skip
def test_a_rung_is_stopped_at_the_first_complete_checkpoint_while_no_node_failed(
    statuses: list[dict[str, object] | None], found: tuple[int, str] | None
) -> None:
    assert first_checkpoint(statuses) == found


def test_dry_run_without_ladder_steps_sets_no_step_bound(gpujob: Callable[..., Result]) -> None:
    result = gpujob("submit", str(REPO / "jobs/quickstart.yaml"), "--dry-run", "--ladder", "1,2",
                    "--job-id", "lad")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("ladder lad: 2 rung(s), each until its first complete checkp")
    assert "GPUJOB_MAX_STEPS" not in result.stdout
