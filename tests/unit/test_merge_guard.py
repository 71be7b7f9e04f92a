"""`merge:` naming an adapter the job will write (not here at submit): accepted when
`merge.base` is named and full precision, refused by the base's name before anything runs
(or is rented), with the merge named and both fixes; the plan's node 0 checks the adapter's
own config on the host before it merges. The host-side rule is the same function, called
here on folders as the run would leave them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from planning import plan_of, run_sh, spec_of

from launcher.agent.merge_check import refusal


def job(tmp_path: Path, merge: str) -> Path:
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "train.py").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: t\nimage: host\nworkdir: work\nrun: {{entrypoint: train.py}}\n{merge}")
    return spec


def test_an_adapter_the_job_will_write_is_accepted_with_a_full_precision_base(
    gpujob: Callable, tmp_path: Path
) -> None:
    spec = job(tmp_path, "merge: {adapter: work/out/lora, base: meta-llama/Llama-3.1-8B}\n")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "merge_check.py out/lora meta-llama/Llama-3.1-8B" in result.stdout
    assert "merge.py out/lora meta-llama/Llama-3.1-8B out/lora-merged" in result.stdout


@pytest.mark.parametrize(
    ("base", "quant", "use"),
    [
        ("unsloth/Qwen2.5-1.5B-bnb-4bit", "bnb", "unsloth/Qwen2.5-1.5B"),
        ("TheBloke/Llama-2-7B-GPTQ", "gptq", "TheBloke/Llama-2-7B"),
        ("casperhansen/mistral-7b-instruct-v0.1-awq", "awq",
         "casperhansen/mistral-7b-instruct-v0.1"),
    ],
)  # fmt: skip
def test_a_quantized_base_for_an_adapter_still_to_come_is_refused_by_name(
    gpujob: Callable, tmp_path: Path, base: str, quant: str, use: str
) -> None:
    spec = job(tmp_path, f"merge:\n  adapter: work/out/lora\n  base: {base}\n")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"gpujob: error: {spec}:7: merge.base: {base} is a quantized base ({quant}); merging "
        f"the adapter work/out/lora into it gives a corrupted model (4-bit rounding, seed 002): "
        f"merge into its 16-bit sibling {use} instead (merge.base), or keep the adapter "
        "separate (remove `merge:`)"
    ]


def test_an_adapter_still_to_come_needs_its_base_named(gpujob: Callable, tmp_path: Path) -> None:
    spec = job(tmp_path, "merge: {adapter: work/out/lora}\n")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert f"{spec}:5: merge.adapter: {tmp_path}/work/out/lora is not here" in result.stderr
    assert "name the model it merges into with merge.base" in result.stderr


def test_an_adapter_outside_the_workdir_is_refused_naming_the_path_to_write(
    gpujob: Callable, tmp_path: Path
) -> None:
    spec = job(tmp_path, "merge: {adapter: out/lora, base: org/model}\n")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"gpujob: error: {spec}:5: merge.adapter: out/lora is outside the workdir work (both "
        "are relative to the spec); the merge runs on the host inside the workdir. write it as "
        "work/out/lora if the job writes it there, or give the host's absolute path"
    ]


def test_an_adapter_here_is_judged_by_its_own_config_even_when_merge_base_is_set(
    gpujob: Callable, tmp_path: Path
) -> None:
    """Submit applies the host's rule: an adapter trained on `x-bnb-4bit` merges into the
    16-bit `x` that merge.base names (QLoRA's fix), and is refused now, before anything is
    rented, when merge.base names another model."""
    folder = tmp_path / "work" / "lora"
    folder.mkdir(parents=True)
    config = {"base_model_name_or_path": "org/model-bnb-4bit"}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    spec = job(tmp_path, "merge: {adapter: work/lora, base: org/model}\n")
    assert gpujob("submit", str(spec), "--dry-run").exit_code == 0
    spec = job(tmp_path, "merge: {adapter: work/lora, base: org/other}\n")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2, result.stdout
    assert result.stderr.strip().splitlines() == [
        f"gpujob: error: {spec}:5: merge.adapter: {refusal(folder, 'org/other', tmp_path)}"
    ]
    assert "the adapter was trained on org/model-bnb-4bit, a quantized base (bnb), and " in (
        result.stderr
    )
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/m"}))
    assert gpujob("submit", str(spec), "--dry-run").exit_code == 0


def test_only_node_0_merges_and_only_after_its_program() -> None:
    spec = spec_of(nodes=2, merge={"adapter": "out/lora", "base": "b", "into": "final"})
    plan = plan_of(spec, None)
    node0, node1 = run_sh(plan, 0), run_sh(plan, 1)
    check = node0.index("node-0/merge_check.py out/lora b\n")
    program = node0.index("train.py &\n")  # waited for: a stop's checkpoint ends first
    skip = node0.index('if [ "$code" != 0 ] || [ "$stops" != 0 ]; then exit "$code"; fi\n')
    assert program < skip < check < node0.index("node-0/merge.py out/lora b final\n")
    assert "trap 'stops=$((stops + 1))' TERM INT\n" in node0  # a stop is noted, not re-sent
    assert "\nexec " not in node0  # the merge follows the program, so it is not exec'd
    assert "merge" not in node1 and "\nexec " in node1


def adapter(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("config", "merge_base", "said"),
    [
        ({"base_model_name_or_path": "org/model-AWQ"}, "org/other",
         "the adapter was trained on org/model-AWQ, a quantized base (awq)"),
        ({"base_model_name_or_path": "org/model"}, "org/model-bnb-4bit",
         "the adapter would merge into org/model-bnb-4bit, a quantized base (bnb)"),
        ({"base_model_name_or_path": "org/m", "quantization_config": {"load_in_4bit": True}}, "",
         "the adapter was trained on org/m loaded quantized (quantized 4-bit), and merge.base "
         "does not name the 16-bit base to merge into: merge into its 16-bit sibling org/m"),
        ({}, "", "no base_model_name_or_path, and merge.base is not set"),
    ],
)  # fmt: skip
def test_the_host_check_reads_the_adapters_own_config(
    tmp_path: Path, config: dict, merge_base: str, said: str
) -> None:
    folder = adapter(tmp_path / "out" / "lora", config)
    why = refusal(folder, merge_base, tmp_path)
    assert why is not None and why.startswith(f"{folder}/adapter_config.json: ")
    assert said in why


def test_the_host_check_passes_a_full_precision_base_and_names_a_missing_adapter(
    tmp_path: Path,
) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text('{"hidden_size": 16}')
    folder = adapter(tmp_path / "out" / "lora", {"base_model_name_or_path": "base"})
    assert refusal(folder, "base", tmp_path) is None
    (tmp_path / "base" / "config.json").write_text(
        '{"quantization_config": {"quant_method": "gptq", "bits": 4}}'
    )
    assert "a quantized base (gptq 4)" in str(refusal(folder, "base", tmp_path))
    missing = refusal(tmp_path / "gone", "base", tmp_path)
    assert missing is not None and "adapter_config.json: not found" in missing
