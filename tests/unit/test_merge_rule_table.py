"""The merge rule (issue 30), one table through both of its call sites: `gpujob submit`
judging an adapter that is already here (storage/merge_guard.py) and the host's own check
after the run wrote it (`python merge_check.py ADAPTER BASE`, stdlib, as node 0 runs it).
An adapter trained on a quantized base merges into that base's 16-bit sibling (QLoRA's
fix, which the refusal itself recommends), never into the quantized base, nor into a model
of another name; each case gives the same verdict, in the same words, at both."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.agent.merge_check import __file__ as MERGE_CHECK

QLORA = "unsloth/llama-3-8b-bnb-4bit"
CASES = [
    # (trained on, the adapter records a quantization, merge.base, refusal said or None)
    (QLORA, False, "unsloth/llama-3-8b", None),  # the same owner's name minus the suffix
    (QLORA, False, "meta-llama/Meta-Llama-3-8B", None),  # its upstream model (KNOWN)
    (QLORA, False, "Unsloth/Llama-3-8B", None),  # repo ids compared as the Hub does
    ("TheBloke/Llama-2-7B-GPTQ", False, "TheBloke/Llama-2-7B", None),
    ("org/model-AWQ", False, "org/model", None),
    ("meta-llama/Llama-2-7b-hf", True, "meta-llama/Llama-2-7b-hf", None),  # QLoRA on the fly
    ("org/model", False, "org/model", None),
    ("org/model", False, "", None),
    (QLORA, False, QLORA, f"would merge into {QLORA}, a quantized base (bnb)"),
    (QLORA, False, "", f"trained on {QLORA}, a quantized base (bnb); merging it into that base"),
    (QLORA, False, "other/llama-3-8b", "merge.base other/llama-3-8b is not that base's 16-bit"),
    (QLORA, False, "mistralai/Mistral-7B-v0.1", "is not that base's 16-bit sibling"),
    ("meta-llama/Llama-2-7b-hf", True, "", "loaded quantized (bitsandbytes 4-bit), and merge."),
    ("org/model", False, "org/model-bnb-4bit", "would merge into org/model-bnb-4bit"),
]


def adapter(work: Path, trained_on: str, recorded: bool) -> Path:
    folder = work / "lora"
    folder.mkdir(parents=True)
    config: dict = {"base_model_name_or_path": trained_on, "peft_type": "LORA"}
    if recorded:
        config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(("trained_on", "recorded", "merge_base", "said"), CASES)
def test_submit_and_the_host_give_the_same_verdict(
    gpujob: Callable, tmp_path: Path, trained_on: str, recorded: bool, merge_base: str,
    said: str | None,
) -> None:  # fmt: skip
    work = tmp_path / "work"
    folder = adapter(work, trained_on, recorded)
    (work / "train.py").write_text("")
    base = f", base: '{merge_base}'" if merge_base else ""
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: work\nrun: {entrypoint: train.py}\n"
                    f"merge: {{adapter: work/lora{base}}}\n")  # fmt: skip

    submitted = gpujob("submit", str(spec), "--dry-run")
    host = subprocess.run([sys.executable, MERGE_CHECK, "lora", merge_base], cwd=work,
                          capture_output=True, text=True, check=False)  # fmt: skip

    if said is None:
        assert submitted.exit_code == 0, submitted.stderr
        assert host.returncode == 0, host.stdout + host.stderr
        assert host.stdout.startswith("[gpujob] merge: lora/adapter_config.json ")
        return
    assert (submitted.exit_code, host.returncode) == (2, 3), submitted.stderr + host.stdout
    at_submit = submitted.stderr.strip().split(" merge.adapter: ", 1)[1]
    on_host = host.stdout.strip().split("[gpujob] merge refused: ", 1)[1]
    assert at_submit == on_host  # one rule, one line
    assert on_host.startswith(f"{folder}/adapter_config.json: ") and said in on_host
    assert "merge into its 16-bit sibling" in on_host and "Traceback" not in host.stderr
