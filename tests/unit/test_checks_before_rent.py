"""`gpujob submit --up` makes every check this machine can make before the first cloud call:
a job that cannot run is refused with nothing rented. Against the Lambda and Vast fakes on a
thread; the fakes' own request logs say which calls were made."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clouds import calls, lambda_instances, vast_instances

from infra.fakes import RunningFake

RENTING = {"lambda": "launch", "vast": "create_instance"}


def job(tmp_path: Path, extra: str = "", image: str = "host") -> Path:
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: t\nimage: {image}\nworkdir: work\nrun: {{entrypoint: train.py}}\n"
                    + extra)  # fmt: skip
    return spec


def refused(result: Any, code: int, *said: str) -> None:
    """The command's exit code and one-line error, read as the user reads them."""
    assert result.exit_code == code, result.stderr
    for words in said:
        assert words in result.stderr, result.stderr


def nothing_rented(clouds: dict[str, RunningFake]) -> None:
    for cloud, fake in clouds.items():
        assert calls(fake, RENTING[cloud]) == [], f"{cloud} was asked to rent"
    assert lambda_instances(clouds["lambda"]) == []
    assert vast_instances(clouds["vast"]) == []


@pytest.mark.parametrize("provider", ["lambda", "vast"])
def test_a_merge_onto_a_quantized_base_is_refused_before_renting(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path, provider: str
) -> None:
    adapter = tmp_path / "work" / "adapter"
    adapter.mkdir(parents=True)
    config = {"base_model_name_or_path": "unsloth/Qwen2.5-1.5B-bnb-4bit"}
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    spec = job(tmp_path, "merge: {adapter: work/adapter}\n")
    result = gpujob("submit", str(spec), "--up", "a100", "--provider", provider, "--allow-cpu")
    refused(result, 2, "a quantized base")
    assert len(result.stderr.splitlines()) == 1
    nothing_rented(clouds)


def test_an_s3_remote_that_does_not_answer_is_refused_before_renting(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("BAD_KEY", "k")
    monkeypatch.setenv("BAD_SECRET", "s")
    spec = job(tmp_path, (
        "storage:\n  bad: {provider: Other, endpoint: 'http://127.0.0.1:9', "
        "bucket: ckpts, access_key_env: BAD_KEY, secret_key_env: BAD_SECRET}\n"
        "checkpoints: {sync_to: 'bad:runs/t'}\n"
    ))  # fmt: skip
    result = gpujob("submit", str(spec), "--up", "a100", "--allow-cpu")
    refused(result, 1, "checkpoints.sync_to bad:runs/t", "nothing was rented")
    nothing_rented(clouds)


def test_a_disk_budget_over_the_disk_asked_is_refused_before_renting(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path
) -> None:
    spec = job(tmp_path, "checkpoints: {size_gb: 40, keep_last: 2}\n")
    result = gpujob("submit", str(spec), "--up", "a100", "--disk", "100", "--allow-cpu")
    refused(result, 2, "disk budget: checkpoints 3 x 40.00 GiB", "the 100 GB asked (--disk)")
    nothing_rented(clouds)


def test_a_stale_image_lock_is_refused_before_renting(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path
) -> None:
    images = tmp_path / "images"
    images.mkdir()
    shipped = Path(__file__).resolve().parents[2] / "launcher" / "images" / "definitions"
    (images / "lab-cpu.lock").write_text((shipped / "lab-cpu.lock").read_text())
    changed = (shipped / "lab-cpu.yaml").read_text() + "# edited after its lock was made\n"
    (images / "lab-cpu.yaml").write_text(changed)
    spec = job(tmp_path, image="lab-cpu")
    result = gpujob("submit", str(spec), "--up", "a100", "--runtime", "bare", "--allow-cpu")
    refused(result, 2, "the lock is older than", "nothing was rented")
    nothing_rented(clouds)
