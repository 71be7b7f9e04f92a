"""`gpujob submit --up` makes every check this machine can make before the first cloud call:
a job that cannot run is refused with nothing rented. Against the Lambda and Vast fakes on a
thread; the fakes' own request logs say which calls were made."""

from __future__ import annotations

import json
import re
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
    spec = job(tmp_path, "resources: {disk_gb: 100}\ncheckpoints: {size_gb: 40, keep_last: 2}\n")
    result = gpujob("submit", str(spec), "--up", "a100", "--allow-cpu", "--disk", "100")
    refused(result, 2, "disk budget: checkpoints 3 x 40.00 GiB", "the 100 GB asked (--disk)")
    nothing_rented(clouds)


@pytest.mark.parametrize(("extra", "flags", "disk"), [
    ("resources: {disk_gb: 50}\n", [], 50),  # the field, which submit --up ignored (20 GB)
    ("resources: {disk_gb: 50}\n", ["--disk", "70"], 70),  # the flag wins over the field
    # the field is the free disk the job needs, not a cap: the budget (its environment, its
    # 3 x 40 GiB of checkpoints) decides above it
    ("resources: {disk_gb: 1}\ncheckpoints: {size_gb: 40, keep_last: 2}\n", [], None),
    ("", [], 20),  # neither: the budget, with Vast's least
])  # fmt: skip
def test_vast_creates_the_disk_the_flag_or_the_spec_asks_for(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path,
    extra: str, flags: list[str], disk: int | None,
) -> None:  # fmt: skip
    vast = clouds["vast"]
    said = "error 400/3467: Invalid args: stopped here by the test"
    vast.control.fault(op="create_instance", status=400, code="invalid_args", message=said)
    spec = job(tmp_path, extra)
    result = gpujob("submit", str(spec), "--up", "a100", "--provider", "vast", "--allow-cpu",
                    *flags)  # fmt: skip
    refused(result, 1, "stopped here by the test")
    (create,) = calls(vast, "create_instance")
    if disk is None:  # the budget's own figure, as it was said
        said_gb = re.search(r"offers with less than (\d+) GB", result.stderr)
        assert said_gb and int(said_gb.group(1)) > 120, result.stderr
        disk = int(said_gb.group(1))
    assert create["body"]["disk"] == disk
    assert calls(vast, "search_offers")[-1]["body"]["disk_space"] == {"gte": disk}
    assert vast_instances(vast) == []


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


def test_the_specs_filesystem_is_made_in_the_offers_region_and_named_at_launch(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path
) -> None:
    lam = clouds["lambda"]
    lam.control.fault(op="launch", status=400, code="global/invalid-parameters",
                      message="stopped here by the test")  # fmt: skip
    spec = job(tmp_path, "resources: {filesystem: ckpts}\n")
    asked = gpujob("submit", str(spec), "--up", "a100", "--provider", "lambda", "--allow-cpu")
    refused(asked, 2, "lambda: no filesystem named 'ckpts' (yours: none)", "add --yes to create")
    assert calls(lam, "create_filesystem") == calls(lam, "launch") == []
    result = gpujob("submit", str(spec), "--up", "a100", "--provider", "lambda", "--allow-cpu",
                    "--yes")  # fmt: skip
    refused(result, 1, "stopped here by the test")
    (made,) = calls(lam, "create_filesystem")
    (launch,) = calls(lam, "launch")
    assert launch["body"]["file_system_names"] == ["ckpts"]
    assert launch["body"]["region_name"] == made["body"]["region"]
    assert "created the Lambda filesystem ckpts in " in result.stderr
    vast = gpujob("submit", str(spec), "--up", "a100", "--provider", "vast", "--allow-cpu")
    refused(vast, 2, "--filesystem (resources.filesystem) is for Lambda")
    assert calls(clouds["vast"], "create_instance") == []
