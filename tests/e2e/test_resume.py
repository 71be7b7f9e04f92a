"""The quickstart continues a lost run from its last checkpoint, through the real CLI: 2 gloo
ranks under torchrun on this machine, as a recovery restarts it on a fresh head
(`GPUJOB_RESUME_FROM` names the checkpoint pulled there; a local job inherits the variable
from the submitting shell).

The check is the user's: the resumed run's log goes on from step K+1 with the very losses an
uninterrupted run printed, no step twice, to the same last step and the same weights.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
STEPS, SAVED_AT = 12, 8
STEP_LINE = re.compile(rf"^step (\d+)/{STEPS} loss ([0-9.]+) ", re.M)


def submit(
    env: dict[str, str], job_id: str, steps: int, *flags: str, ranks: int = 2
) -> subprocess.CompletedProcess:
    """The quickstart, small: a step line per step, a checkpoint every 4 steps."""
    args = json.dumps(["--steps", str(steps), "--log-every", "1", *flags])
    return subprocess.run(
        [GPUJOB, "submit", "jobs/quickstart.yaml", "--job-id", job_id, "--set",
         f"run.args={args}", "--set", "checkpoints.every_steps=4", "--set",
         f"run.nproc_per_node={ranks}"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def quickstart(env: dict[str, str], job_id: str, steps: int, ranks: int = 2) -> str:
    result = submit(env, job_id, steps, ranks=ranks)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result.stdout


def steps_and_losses(log: str, total: int = STEPS) -> list[tuple[int, str]]:
    line = re.compile(rf"^step (\d+)/{total} loss ([0-9.]+) ", re.M)
    return [(int(step), loss) for step, loss in line.findall(log)]


def checkpoint(state: Path, job_id: str, step: int) -> Path:
    return state / "jobs" / job_id / "checkpoints" / f"checkpoint-{step}"


def test_a_resumed_run_continues_the_loss_curve_of_the_lost_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = dict(os.environ, GPUJOB_STATE_DIR=str(state))
    env.pop("GPUJOB_RESUME_FROM", None)
    whole = steps_and_losses(quickstart(env, "whole", STEPS))
    assert [step for step, _ in whole] == list(range(1, STEPS + 1))

    # The lost run: its host went after checkpoint-8 was written (and synced).
    lost = steps_and_losses(quickstart(env, "lost", SAVED_AT), SAVED_AT)
    assert lost == whole[:SAVED_AT]
    saved = checkpoint(state, "lost", SAVED_AT)
    assert (saved / ".gpujob-complete").is_file()
    assert sorted(p.name for p in saved.glob("rng_state_*.pth")) == [
        "rng_state_0.pth",
        "rng_state_1.pth",
    ]
    recorded = json.loads((saved / "trainer_state.json").read_text())
    assert recorded["global_step"] == SAVED_AT
    assert f"{recorded['loss']:.4f}" == whole[SAVED_AT - 1][1]  # the loss at the resume step

    # A recovery pulls it onto the new head (a fresh folder) and restarts the job from it.
    pulled = tmp_path / "new-head" / "checkpoints" / f"checkpoint-{SAVED_AT}"
    shutil.copytree(saved, pulled)
    log = quickstart(dict(env, GPUJOB_RESUME_FROM=str(pulled)), "resumed", STEPS)
    assert log.count(f"resumed from checkpoint-{SAVED_AT} (step {SAVED_AT})\n") == 1
    resumed = steps_and_losses(log)
    printed = [step for step, _ in resumed]
    assert printed == list(range(SAVED_AT + 1, STEPS + 1))  # none twice, none before, ends at N
    assert resumed == whole[SAVED_AT:]  # the same losses, step for step
    assert re.search(rf"^final loss {whole[-1][1]}$", log, re.M)

    end, uninterrupted = checkpoint(state, "resumed", STEPS), checkpoint(state, "whole", STEPS)
    ended = json.loads((end / "trainer_state.json").read_text())
    expected = json.loads((uninterrupted / "trainer_state.json").read_text())
    assert ended["global_step"] == STEPS
    assert abs(ended["loss"] - expected["loss"]) <= 1e-6
    assert (end / "model.safetensors").read_bytes() == (
        uninterrupted / "model.safetensors"
    ).read_bytes()


def test_an_incomplete_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    half = tmp_path / "checkpoint-4"
    half.mkdir()
    (half / "trainer_state.json").write_text('{"global_step": 4}\n')
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"), GPUJOB_RESUME_FROM=str(half))
    result = subprocess.run(
        [GPUJOB, "submit", "jobs/quickstart.yaml", "--job-id", "half", "--set",
         'run.args=["--steps", "4"]'],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"cannot resume: {half} is not a complete checkpoint (no .gpujob-complete)" in (
        result.stdout
    )
    assert not STEP_LINE.search(result.stdout)


def test_one_rank_resumes_alone_and_a_wrong_checkpoint_is_one_line(tmp_path: Path) -> None:
    """One rank, as the GPU profile runs: it reads the folder and sends nothing (no
    collective; under NCCL a pickled optimizer state would go through the GPU). A checkpoint
    of another model, or one missing a file, is the user's slip: one line from the program,
    which exits 2, and no traceback of its own (torchrun still reports the failed rank)."""
    state = tmp_path / "state"
    env = dict(os.environ, GPUJOB_STATE_DIR=str(state))
    env.pop("GPUJOB_RESUME_FROM", None)
    whole = steps_and_losses(quickstart(env, "alone", STEPS, ranks=1))
    saved = checkpoint(state, "alone", SAVED_AT)  # kept: keep_last 2 holds 8 and 12
    assert sorted(p.name for p in saved.glob("rng_state_*.pth")) == ["rng_state_0.pth"]
    log = quickstart(dict(env, GPUJOB_RESUME_FROM=str(saved)), "alone-resumed", STEPS, ranks=1)
    assert log.count(f"resumed from checkpoint-{SAVED_AT} (step {SAVED_AT})\n") == 1
    assert steps_and_losses(log) == whole[SAVED_AT:]

    other = submit(dict(env, GPUJOB_RESUME_FROM=str(saved)), "wider", STEPS, "--hidden", "32",
                   ranks=1)  # fmt: skip
    assert other.returncode == 1, other.stdout[-3000:]
    said = [line for line in other.stdout.splitlines() if line.startswith("cannot resume:")]
    assert said == [
        f"cannot resume: {saved} holds another model (size mismatch for "
        "model.embed_tokens.weight: copying a param with shape torch.Size([256, 64]) from "
        "checkpoint, the shape in current model is torch.Size([256, 32])); resume with the "
        "--hidden, --layers and --heads it was saved with"
    ]
    assert re.search(r"exitcode\s*: 2 ", other.stdout), other.stdout[-3000:]
    assert 'train.py", line' not in other.stdout + other.stderr
    assert not STEP_LINE.search(other.stdout)

    lacking = tmp_path / "lacking" / f"checkpoint-{SAVED_AT}"
    shutil.copytree(saved, lacking)
    (lacking / "trainer_state.json").unlink()
    bare = submit(dict(env, GPUJOB_RESUME_FROM=str(lacking)), "lacking", STEPS)  # two ranks
    assert bare.returncode == 1, bare.stdout[-3000:]
    assert (
        f"cannot resume: {lacking}: cannot read trainer_state.json (No such file or directory)\n"
        in bare.stdout
    )
    assert 'train.py", line' not in bare.stdout + bare.stderr
    assert not STEP_LINE.search(bare.stdout)
