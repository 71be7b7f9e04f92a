"""The batch arithmetic and the merge guard where a SkyPilot user writes them (`run:`,
`setup:` and the envs they read), refused before anything is planned or rented, silenced by
`checks:`; through the real CLI's dry run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

BATCH = """num_nodes: {nodes}
resources:
  accelerators: H100:{gpus}
envs:
  GLOBAL_BATCH_SIZE: {gbs}
  MICRO_BATCH_SIZE: {mbs}
{checks}run: |
  WORLD_SIZE=$((SKYPILOT_NUM_NODES * SKYPILOT_NUM_GPUS_PER_NODE))
  GRAD_ACCUM=$(( GLOBAL_BATCH_SIZE / (MICRO_BATCH_SIZE * WORLD_SIZE) ))
  echo torchrun train.py --grad-accum $GRAD_ACCUM
"""


def submit(tmp_path: Path, gpujob: Callable, text: str) -> tuple[int, str]:
    path = tmp_path / "task.yaml"
    path.write_text(text)
    result = gpujob("submit", str(path), "--dry-run")
    return result.exit_code, result.stderr.replace(f"{path}:", "task.yaml:")


@pytest.mark.parametrize("nodes, gpus, gbs, mbs, checks, refusal", [
    (1, 6, 32, 1, "", "task.yaml:5: envs.GLOBAL_BATCH_SIZE: 32 / (world_size 6 x "
     "envs.MICRO_BATCH_SIZE 1) = 5.33, not a whole number of accumulation steps; shell "
     "arithmetic would take 5 and train on 30 per step; use a GLOBAL_BATCH_SIZE of 30 or 36"),
    (2, 8, 48, 2, "", "48 / (world_size 16 x envs.MICRO_BATCH_SIZE 2) = 1.50"),
    (2, 8, 64, 2, "", None),
    (1, 6, 36, 1, "", None),
    (1, 6, 32, 1, "checks:\n  batch: off\n", None),
])  # fmt: skip
def test_batch_arithmetic_of_the_envs(
    tmp_path: Path, gpujob: Callable, nodes: int, gpus: int, gbs: int, mbs: int, checks: str,
    refusal: str | None,
) -> None:  # fmt: skip
    code, stderr = submit(tmp_path, gpujob, BATCH.format(nodes=nodes, gpus=gpus, gbs=gbs,
                                                         mbs=mbs, checks=checks))  # fmt: skip
    if refusal is None:
        assert code == 0, stderr
    else:
        assert code == 2 and refusal in stderr, stderr
        assert len([line for line in stderr.splitlines() if "error:" in line]) == 1


def test_envs_the_script_does_not_read_are_not_judged(tmp_path: Path, gpujob: Callable) -> None:
    text = "envs:\n  GLOBAL_BATCH_SIZE: 32\n  MICRO_BATCH_SIZE: 5\nrun: python train.py\n"
    code, stderr = submit(tmp_path, gpujob, text)
    assert code == 0, stderr


MERGE = "envs:\n  BASE: {base}\n{checks}{field}: |\n  {line}\n{rest}"


@pytest.mark.parametrize("base, line, field, checks, refused", [
    ("x", "python merge_lora.py --base unsloth/llama-3-8b-bnb-4bit --adapter out", "run", "",
     "task.yaml:3: run: merges an adapter with the quantized base unsloth/llama-3-8b-bnb-4bit "
     "(bnb), which gives a corrupted model"),
    ("TheBloke/Llama-2-7B-GPTQ", "python -c 'm.merge_and_unload()' $BASE", "run", "", "gptq"),
    ("casperhansen/llama-3-8b-instruct-awq", "python export_merged.py --model ${BASE}",
     "setup", "", "task.yaml:3: setup: merges an adapter with the quantized base "
     "casperhansen/llama-3-8b-instruct-awq (awq)"),
    ("unsloth/llama-3-8b-bnb-4bit", "python train_qlora.py --model $BASE", "run", "", None),
    ("meta-llama/Meta-Llama-3-8B", "python merge_lora.py --base $BASE", "run", "", None),
    ("unsloth/llama-3-8b-bnb-4bit", "python merge_lora.py --base $BASE", "run",
     "checks: {merge: off}\n", None),
    ("meta-llama/Meta-Llama-3-8B", "python train.py --model unsloth/llama-3-8b-bnb-4bit\n  "
     "python merge_lora.py --base $BASE --adapter out", "run", "", None),
    ("x", "python merge_lora.py --adapter out \\\n    --base_model "
     "unsloth/llama-3-8b-bnb-4bit", "run", "", "unsloth/llama-3-8b-bnb-4bit (bnb)"),
])  # fmt: skip
def test_merge_guard_on_the_script(
    tmp_path: Path, gpujob: Callable, base: str, line: str, field: str, checks: str,
    refused: str | None,
) -> None:  # fmt: skip
    rest = "run: echo done\n" if field == "setup" else ""
    text = MERGE.format(base=base, checks=checks, field=field, line=line, rest=rest)
    code, stderr = submit(tmp_path, gpujob, text)
    if refused is None:
        assert code == 0, stderr
    else:
        assert code == 2 and refused in stderr, stderr


def test_a_gpujob_spec_is_judged_too(tmp_path: Path, gpujob: Callable) -> None:
    text = ("name: own\nimage: host\nnodes: 2\nenvs:\n  GLOBAL_BATCH_SIZE: 10\n"
            "  MICRO_BATCH_SIZE: 1\nrun:\n  shell: echo $GLOBAL_BATCH_SIZE $MICRO_BATCH_SIZE\n"
            "resources:\n  accelerators: A100:2\n")  # fmt: skip
    code, stderr = submit(tmp_path, gpujob, text)  # no $(( )) of its own: a warning
    assert code == 0 and "warning: " in stderr, stderr
    assert "10 / (world_size 4 x envs.MICRO_BATCH_SIZE 1) = 2.50" in stderr
    divides = text.replace("echo $GLOBAL", "echo $((GLOBAL_BATCH_SIZE / MICRO_BATCH_SIZE / "
                           "WORLD_SIZE)) $GLOBAL")  # fmt: skip
    code, stderr = submit(tmp_path, gpujob, divides)
    assert code == 2 and "10 / (world_size 4 x envs.MICRO_BATCH_SIZE 1) = 2.50" in stderr
    code, stderr = submit(tmp_path, gpujob, divides + "checks:\n  batch: false\n")
    assert code == 0 and "2.50" not in stderr, stderr


def test_megatron_and_device_map_jobs_are_warned_not_refused(
    tmp_path: Path, gpujob: Callable
) -> None:
    """Megatron divides by its data-parallel size itself; a device_map job is one process."""
    megatron = BATCH.format(nodes=1, gpus=8, gbs=36, mbs=1, checks="").replace(
        "GRAD_ACCUM=$(( GLOBAL_BATCH_SIZE / (MICRO_BATCH_SIZE * WORLD_SIZE) ))",
        'ARGS="--global-batch-size $GLOBAL_BATCH_SIZE --micro-batch-size $MICRO_BATCH_SIZE '
        '--tensor-model-parallel-size 4"',
    )
    code, stderr = submit(tmp_path, gpujob, megatron)
    assert code == 0 and "warning: " in stderr and "36 / (world_size 8" in stderr, stderr
