"""The resolver against the catalog: the checked-in locks are its output byte for byte, and
every impossible pin is refused with the rule it breaks and the nearest pins that work."""

from __future__ import annotations

from pathlib import Path

import pytest
from imaging import CATALOG, IMAGES, LOCKED, definition, snapshot

from launcher.errors import UsageError
from launcher.images.commands import read_definition
from launcher.images.resolve import Refused, resolve
from launcher.images.rules import check
from launcher.images.wheels import WheelRecord

SEED = "base: python:3.10-slim-bookworm\npython: '3.10'\ntorch: 2.3.1\ncuda: cu121\n"


@pytest.mark.parametrize("name", LOCKED)
def test_checked_in_lock_is_the_resolvers_output_byte_for_byte(name: str) -> None:
    found = read_definition(name)
    lock = resolve(found.definition, CATALOG, snapshot(name), found.text)
    assert lock.to_text() == (IMAGES / f"{name}.lock").read_text()
    again = resolve(found.definition, CATALOG, snapshot(name), found.text)
    assert again.to_text() == lock.to_text()


def test_seed_stack_locks_the_real_flash_attn_wheel_and_marks_its_hash_unknown() -> None:
    found = read_definition("seed-cu121-py310")
    lock = resolve(found.definition, CATALOG, snapshot("seed-cu121-py310"), found.text)
    fa = next(p for p in lock.packages if p.name == "flash-attn")
    assert fa.filename == "flash_attn-2.5.8+cu122torch2.3cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    assert fa.url.startswith(
        "https://github.com/Dao-AILab/flash-attention/releases/download/v2.5.8/"
    )
    assert fa.sha256 is None and lock.unknown_hashes == [fa.filename]
    torch = next(p for p in lock.packages if p.name == "torch")
    assert torch.sha256 and "cu121 build" in torch.notes[0]
    assert lock.cxx11abi is False
    assert "closure is unchecked for: " in lock.notes[-1] and "torchvision" in lock.notes[-1]


BAD = [
    ("torch: 2.4.3\ncuda: cu121\n", "torch", "torch-exists", "torch 2.4.1, torch 2.5.0"),
    ("torch: 2.1.9\ncuda: cu121\n", "torch", "torch-exists", "catalog of 2026-11-22: 2.0.1 to"),
    ("torch: 2.8.0\ncuda: cu121\n", "cuda", "cuda-variant-published", "torch 2.8.0+cu126"),
    ("torch: 2.8.0+cu124\n", "cuda", "cuda-variant-published", "published: cpu, cu126, cu128"),
    (
        "torch: 2.8.0\ncuda: cu128\nflash_attn: 2.5.8\n",
        "flash_attn",
        "flash-attn-wheel-exists",
        "flash-attn 2.8.3 with torch 2.8.0+cu128",
    ),
    (
        "torch: 2.10.0\ncuda: cu128\nflash_attn: 2.8.3\n",
        "flash_attn",
        "flash-attn-wheel-exists",
        "no official flash-attn 2 wheel exists for torch ≥ 2.9",
    ),
    (
        "torch: 2.6.0\ncuda: cu124\nflash_attn: 2.8.3\n",
        "flash_attn",
        "flash-attn-cxx11abi",
        "flash-attn 2.7.4.post1 with torch 2.6.0+cu124",
    ),
    ("torch: 2.13.0\ncuda: cpu\nflash_attn: 2.8.3\n", "flash_attn", "flash-attn-needs-cuda", ""),
    (
        "torch: 2.8.0\ncuda: cu128\ntorchvision: 0.15.2\n",
        "torchvision",
        "torchvision-pairs-with-torch",
        "torchvision: 0.23.0",
    ),
    (
        "torch: 2.3.1\ncuda: cu121\ntorchvision: 0.19.0\n",
        "torchvision",
        "torchvision-pairs-with-torch",
        "0.19.0 belongs to torch 2.4.0",
    ),
    (
        "torch: 2.2.2\ncuda: cu121\nrequirements: [numpy==2.0.2]\n",
        "requirements.0",
        "numpy-bounds",
        "numpy==1.26.4",
    ),
    (
        "torch: 2.3.1\ncuda: cu121\nrequirements: [torch==2.3.1]\n",
        "requirements.0",
        "one-place-per-pin",
        "torch: 2.3.1",
    ),
    ("torch: 2.3.1\ncuda: cu121\ndeepspeed: {version: 0.19.8}\n", "deepspeed", "no-compile", ""),
    (
        "torch: 2.3.1\ncuda: cu121\nindexes: [https://flashattn.github.io/whl/cu121/torch2.3/]\n",
        "indexes.0",
        "real-index",
        "flash-attn comes from its GitHub release",
    ),
]


@pytest.mark.parametrize(("body", "field", "rule", "nearest"), BAD, ids=[b[2] for b in BAD])
def test_impossible_pins_are_refused_offline_with_rule_and_nearest_pins(
    tmp_path: Path, body: str, field: str, rule: str, nearest: str
) -> None:
    found = definition(tmp_path, "base: python:3.11-slim-bookworm\npython: '3.11'\n" + body)
    refusals = check(found.definition, CATALOG)
    assert refusals, body
    assert (refusals[0].field, refusals[0].rule) == (field, rule)
    assert nearest in refusals[0].text()


def test_flash_attn_2_5_8_has_no_cp312_wheel(tmp_path: Path) -> None:
    found = definition(tmp_path, SEED.replace("3.10", "3.12") + "flash_attn: 2.5.8\n")
    [refusal] = check(found.definition, CATALOG)
    assert refusal.rule == "flash-attn-wheel-exists"
    assert "torch 2.3 + cu122 (cp312)" in refusal.message
    assert "flash-attn 2.5.8 with python 3.11" in refusal.nearest


def test_base_image_python_differing_from_the_wheels_cp_tag_is_refused(tmp_path: Path) -> None:
    found = definition(
        tmp_path,
        "base: nvidia/cuda:12.1.1-cudnn8-runtime-ubuntu22.04\n"
        "python: '3.11'\ntorch: 2.3.1\ncuda: cu121\n",
    )
    [refusal] = check(found.definition, CATALOG)
    assert refusal.rule == "base-python"
    assert "has Python 3.10, the wheels are cp311" in refusal.message


def _wheel(name: str, version: str, requires: tuple[str, ...] = ()) -> WheelRecord:
    filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    return WheelRecord(name, version, filename, f"file:///w/{filename}", "0" * 64, "test", requires)


def _cpu_torch(version: str = "2.13.0") -> WheelRecord:
    filename = f"torch-{version}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    return WheelRecord(
        "torch",
        f"{version}+cpu",
        filename,
        f"file:///w/{filename}",
        "1" * 64,
        "test",
        ("filelock",),
    )


def test_two_packages_pinning_a_dependency_incompatibly_are_refused(tmp_path: Path) -> None:
    found = definition(
        tmp_path,
        "base: python:3.11-slim-bookworm\npython: '3.11'\n"
        "torch: 2.13.0\nrequirements: [filelock==3.0.0, "
        "transformers==5.23.0]\n",
    )
    offered = {
        "torch": [_cpu_torch()],
        "filelock": [_wheel("filelock", "3.0.0")],
        "transformers": [_wheel("transformers", "5.23.0", ("filelock>=3.20", "torch>=2.6"))],
    }
    with pytest.raises(Refused) as refused:
        resolve(found.definition, CATALOG, offered, found.text)
    [refusal] = refused.value.refusals
    assert refusal.rule == "dependency-pins-agree"
    assert refusal.field == "requirements.0"
    assert "transformers 5.23.0 requires filelock>=3.20 but filelock 3.0.0 is pinned" in (
        refusal.message
    )


def test_a_requirement_missing_from_the_closure_is_refused(tmp_path: Path) -> None:
    found = definition(tmp_path, "base: python:3.11-slim-bookworm\npython: '3.11'\ntorch: 2.13.0\n")
    with pytest.raises(Refused) as refused:
        resolve(found.definition, CATALOG, {"torch": [_cpu_torch()]}, found.text)
    assert refused.value.refusals[0].rule == "closure-complete"
    assert "requires filelock" in refused.value.refusals[0].message


def test_a_pin_with_no_wheel_for_the_target_names_the_versions_there_are(tmp_path: Path) -> None:
    found = definition(
        tmp_path,
        "base: python:3.11-slim-bookworm\npython: '3.11'\n"
        "torch: 2.13.0\nrequirements: [filelock==9.9.9]\n",
    )
    offered = {"torch": [_cpu_torch()], "filelock": [_wheel("filelock", "3.20.0")]}
    with pytest.raises(Refused) as refused:
        resolve(found.definition, CATALOG, offered, found.text)
    assert refused.value.refusals[0].rule == "wheel-exists"
    assert refused.value.refusals[0].nearest == "filelock==3.20.0"


def test_refusal_is_one_line_with_file_line_field_and_exit_code_2(tmp_path: Path) -> None:
    from launcher.images.commands import lock_for
    from launcher.images.index import Sources

    found = definition(
        tmp_path, "base: python:3.11-slim-bookworm\npython: '3.11'\ntorch: 2.8.0\ncuda: cu121\n"
    )
    with pytest.raises(UsageError) as error:
        lock_for(found, CATALOG, Sources((), ()))
    line = error.value.one_line()
    assert "\n" not in line
    assert line.startswith(f"{found.path}:5: cuda: PyTorch never published torch 2.8.0 as cu121")
    assert "nearest valid pins: torch 2.8.0+cu126" in line
    assert error.value.exit_code == 2


def test_deepspeed_comes_only_as_a_prebuilt_wheel_with_its_ops_recorded(tmp_path: Path) -> None:
    from launcher.images.buildplan import plan_build

    sha = "d" * 64
    found = definition(
        tmp_path,
        "base: python:3.11-slim-bookworm\npython: '3.11'\n"
        "torch: 2.13.0\nrequirements: [filelock==3.20.0]\ndeepspeed:\n"
        "  version: 0.19.8\n  wheel: https://example.invalid/deepspeed-0.19.8-"
        f"cp311-cp311-linux_x86_64.whl\n  sha256: '{sha}'\n"
        "  ops: [fused_adam, cpu_adam]\n",
    )
    offered = {"torch": [_cpu_torch()], "filelock": [_wheel("filelock", "3.20.0")]}
    lock = resolve(found.definition, CATALOG, offered, found.text)
    deepspeed = next(p for p in lock.packages if p.name == "deepspeed")
    assert deepspeed.sha256 == sha and deepspeed.notes == ("ops prebuilt: fused_adam, cpu_adam",)
    assert lock.deepspeed_ops == ["cpu_adam", "fused_adam"]
    assert "GPUJOB_DEEPSPEED_OPS=cpu_adam,fused_adam" in plan_build(lock, CATALOG).dockerfile
