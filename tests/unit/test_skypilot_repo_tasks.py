"""SkyPilot's own task files (tests/data/skypilot/, each taken unchanged from
skypilot-org/skypilot, its path and commit in its first line), dry-run as a SkyPilot user
would: each plans, or is refused with exactly the one-line reasons listed here. Through the
real CLI, from a folder holding what the tasks read from the current folder."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

DATA = Path(__file__).parents[1] / "data" / "skypilot"
SERVICE = "SkyServe (replicas behind a load balancer) is SkyPilot's own"

CASES = [
    # (file, HF_TOKEN exported, [(line, field, part of the reason)] or [] when it plans)
    ("examples__distributed-pytorch__train.yaml", False, []),
    ("examples__distributed-pytorch__train-rdzv.yaml", False, []),
    ("examples__distributed_ray_train__ray_train.yaml", False, []),
    ("llm__vllm__serve.yaml", False, []),
    ("llm__axolotl__axolotl.yaml", True, []),
    ("llm__axolotl__axolotl.yaml", False, [(19, "envs.HF_TOKEN", "required (null in the task)")]),
    # resources.ports is read (gpujob port-forward): only SkyServe's `service:` is refused
    ("llm__gemma__serve.yaml", False, [(7, "service", SERVICE)]),
    ("llm__llama-3__llama3.yaml", False, [(61, "service", SERVICE)]),
    # its gs:// bucket is fetched onto the node before setup (GS_* HMAC keys exported below)
    ("llm__gpt-2__gpt2-train.yaml", False, []),
    ("llm__gpt-2__gpt2-pipeline.yaml", False,
     [(27, "several YAML documents", "not supported yet by gpujob")]),
    # its /output bucket mount is read; /configs (and /output) are for a host or a container
    ("llm__llama-3_1-finetuning__lora.yaml", True, [(26, "file_mounts./configs",
                                                     "/configs is outside it")]),
    # a local job writes only inside its folder: /sft is for a host (--on, --up) or a container
    ("llm__gpt-oss-finetuning__gpt-oss-20b-lora.yaml", False,
     [(8, "file_mounts./sft", "/sft is outside it")]),
]  # fmt: skip


@pytest.mark.parametrize("name, token, refusals", CASES)
def test_skypilots_own_tasks_plan_or_say_why(
    tmp_path: Path, gpujob: Callable, monkeypatch: pytest.MonkeyPatch, name: str, token: bool,
    refusals: list[tuple[int, str, str]],
) -> None:  # fmt: skip
    for folder in ("configs", "sft", "mistral"):  # what the tasks read from the current folder
        (tmp_path / folder).mkdir()
    shutil.copy(DATA / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_TOKEN", "hf_NotPrintedAnywhere")
    monkeypatch.setenv("GS_ACCESS_KEY_ID", "GOOG1EXAMPLE")
    monkeypatch.setenv("GS_SECRET_ACCESS_KEY", "gs_NotPrintedAnywhere")
    if not token:
        monkeypatch.delenv("HF_TOKEN")
    result = gpujob("submit", name, "--dry-run")
    for secret in ("hf_NotPrintedAnywhere", "gs_NotPrintedAnywhere"):
        assert secret not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("gpujob: error:")]
    if not refusals:
        assert result.exit_code == 0 and not errors, result.stderr
        assert "SKYPILOT_NODE_RANK=0" in result.stdout.replace("export ", "")
        return
    assert result.exit_code == 2
    assert len(errors) == len(refusals), result.stderr
    for error, (line, field, reason) in zip(errors, refusals, strict=True):
        assert error.startswith(f"gpujob: error: {name}:{line}: {field}"), error
        assert reason in error, error


def test_every_file_names_its_source_and_commit() -> None:
    for path in DATA.glob("*.yaml"):
        first = path.read_text().splitlines()[0]
        source = path.name.replace("__", "/")
        assert first.startswith(f"# Taken unchanged from skypilot-org/skypilot, {source} at ")
