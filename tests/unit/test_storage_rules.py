"""The pure rules of checkpoints and storage: rclone config rendering (seed 000), retention
choices, the merge guard (seed 002), the disk budget, and spec errors that name their line."""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from planning import spec_of

from launcher.agent.ckpt_store import Checkpoint, step_of, to_delete
from launcher.errors import UsageError
from launcher.spec.remote import S3Remote
from launcher.storage import rclone_config
from launcher.storage.remotes import Remote

SECRET = "wJalr/K7MDENG+bPxRfiCY`$(id)\"x'"


def remote(**fields: str) -> Remote:
    data = {"provider": "Other", "endpoint": "http://127.0.0.1:9000", "bucket": "ckpts"}
    return Remote("lab", S3Remote.model_validate(data | fields), "config.yaml:2")


def test_env_form_carries_any_value_literally_and_names_the_remote() -> None:
    creds = {"access_key_id": "AK", "secret_access_key": SECRET}
    env = rclone_config.env_vars(remote(), creds)
    assert env == {
        "RCLONE_CONFIG_GPUJOB_LAB_TYPE": "s3",
        "RCLONE_CONFIG_GPUJOB_LAB_PROVIDER": "Other",
        "RCLONE_CONFIG_GPUJOB_LAB_ENV_AUTH": "false",
        "RCLONE_CONFIG_GPUJOB_LAB_ACCESS_KEY_ID": "AK",
        "RCLONE_CONFIG_GPUJOB_LAB_SECRET_ACCESS_KEY": SECRET,
        "RCLONE_CONFIG_GPUJOB_LAB_ENDPOINT": "http://127.0.0.1:9000",
        "RCLONE_CONFIG_GPUJOB_LAB_FORCE_PATH_STYLE": "true",
        "RCLONE_CONFIG_GPUJOB_LAB_NO_CHECK_BUCKET": "true",
    }
    assert rclone_config.rclone_path(remote(), "/runs/a/") == "gpujob_lab:ckpts/runs/a"


@pytest.mark.parametrize(
    ("secret", "reason"),
    [
        ("abc\ndef", "line break"),
        (" padded", "surrounding spaces"),
        ("`wrapped`", "leading backtick"),
        ("ab`c", "backtick in rclone.conf"),
        ('"""x"""', "triple quote"),
    ],
)
def test_file_form_refuses_what_rclone_would_read_back_differently(secret, reason) -> None:
    creds = {"access_key_id": "AK", "secret_access_key": secret}
    with pytest.raises(UsageError, match=reason) as err:
        rclone_config.conf_text(remote(), creds)
    assert "config.yaml:2: remote lab: cannot write a key" in err.value.message
    assert secret not in err.value.one_line()


def test_file_form_keeps_quotes_dollar_and_hash_literally_in_a_0600_file(tmp_path) -> None:
    creds = {"access_key_id": "AK#x ; y", "secret_access_key": "a$(id)'\"b"}
    text = rclone_config.conf_text(remote(), creds)
    assert "[gpujob_lab]\n" in text and "secret_access_key = a$(id)'\"b\n" in text
    path = tmp_path / "rclone.conf"
    rclone_config.write_conf(path, text)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == text


def test_ca_bundle_goes_to_rclone_for_https_only(monkeypatch) -> None:
    monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/corp.pem")
    assert rclone_config.ca_bundle(remote()) is None
    https = remote(endpoint="https://files.us-east-3.lambda.ai")
    assert rclone_config.env_vars(https, {})["RCLONE_CA_CERT"] == "/etc/corp.pem"
    assert rclone_config.env_vars(https, {})["RCLONE_CONFIG_GPUJOB_LAB_ENV_AUTH"] == "true"


@pytest.mark.parametrize(
    "endpoint", ["`https://files.us-east-3.lambda.ai`", '"https://x.y"', "https://x.y # moto"]
)
def test_a_spec_endpoint_with_quotes_or_backticks_is_refused_at_its_line(
    gpujob: Callable, tmp_path: Path, endpoint: str
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: t\nimage: host\nrun: {entrypoint: train.py}\nstorage:\n  lab:\n"
        f"    bucket: bkt\n    endpoint: '{endpoint}'\n"
    )
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert f"{spec}:7" in result.stderr and "endpoint" in result.stderr
    assert result.stderr.count("\n") == 1


def test_user_config_errors_name_file_line_and_field(gpujob, tmp_path, monkeypatch) -> None:
    (tmp_path / "config.yaml").write_text("remotes:\n  lab:\n    bucket: b\n    provider: Wasabi\n")
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(tmp_path))
    result = gpujob("storage", "check", "lab")
    assert result.exit_code == 2
    assert f"{tmp_path}/config.yaml:4: remotes.lab.provider:" in result.stderr


def ckpts(*steps: int, incomplete: tuple[int, ...] = ()) -> list[Checkpoint]:
    return [Checkpoint(f"checkpoint-{s}", s, Path(f"/c/checkpoint-{s}"), s not in incomplete)
            for s in steps]  # fmt: skip


@pytest.mark.parametrize(
    ("steps", "incomplete", "keep", "safe", "protected", "deleted"),
    [
        ((10, 20, 30, 40), (), 2, "all", (), [10, 20]),
        ((10, 20, 30, 40), (40,), 2, "all", (), [10]),  # 40 is being written: not counted
        ((10, 20, 30, 40), (), 2, (20,), (), [20]),  # only synced ones go
        ((10, 20, 30), (), 1, "all", (10,), [20]),  # a hook still needs 10
        ((10, 20), (), None, "all", (), []),  # retention off
        ((10,), (), 1, "all", (), []),  # never the newest complete one
        ((5, 100, 20), (), 1, "all", (), [5, 20]),  # by step, not by name or mtime
    ],
)
def test_retention_choices(steps, incomplete, keep, safe, protected, deleted) -> None:
    found = sorted(ckpts(*steps, incomplete=incomplete), key=lambda c: c.step)
    safe_names = {c.name for c in found} if safe == "all" else {f"checkpoint-{s}" for s in safe}
    chosen = to_delete(found, keep, safe_names, {f"checkpoint-{s}" for s in protected})
    assert [c.step for c in chosen] == deleted


@pytest.mark.parametrize(
    ("name", "step"),
    [("checkpoint-120", 120), ("step_7", 7), ("global_step300", 300),
     (".tmp-checkpoint-5", None), ("checkpoint-156-merged", None), ("runs", None)],
)  # fmt: skip
def test_what_counts_as_a_checkpoint_name(name, step) -> None:
    assert step_of(name) == step


def adapter(tmp_path: Path, base: str) -> Path:
    folder = tmp_path / "adapter"
    folder.mkdir(exist_ok=True)
    (folder / "adapter_config.json").write_text(f'{{"base_model_name_or_path": "{base}"}}')
    return folder


@pytest.mark.parametrize(
    ("base", "use"),
    [
        ("unsloth/meta-llama-3.1-8b-instruct-unsloth-bnb-4bit",
         "meta-llama/Meta-Llama-3.1-8B-Instruct"),
        ("TheBloke/Llama-2-7B-GPTQ", "TheBloke/Llama-2-7B"),
        ("casperhansen/mistral-7b-instruct-v0.1-awq", "casperhansen/mistral-7b-instruct-v0.1"),
        ("unsloth/Qwen2.5-1.5B-bnb-4bit", "unsloth/Qwen2.5-1.5B"),
    ],
)  # fmt: skip
def test_merge_onto_a_quantized_base_is_refused_with_the_base_to_use(
    gpujob, tmp_path, base, use
) -> None:
    adapter(tmp_path, base)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nrun: {entrypoint: m.py}\nmerge:\n  adapter: adapter\n")
    (tmp_path / "m.py").write_text("")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2, result.stderr
    config = tmp_path / "adapter" / "adapter_config.json"
    assert f"{spec}:5: merge.adapter: {config}: the adapter was trained on {base}" in result.stderr
    assert "merge into its 16-bit sibling " in result.stderr
    assert f"{use} instead (merge.base)" in result.stderr


def test_merge_guard_reads_a_local_base_config_and_passes_full_precision(gpujob, tmp_path):
    (tmp_path / "m.py").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nrun: {entrypoint: m.py}\nmerge: {adapter: adapter}\n")
    adapter(tmp_path, "meta-llama/Meta-Llama-3.1-8B-Instruct")
    assert gpujob("submit", str(spec), "--dry-run").exit_code == 0
    base = tmp_path / "adapter" / "base"
    base.mkdir()
    (base / "config.json").write_text('{"quantization_config": {"quant_method": "gptq"}}')
    adapter(tmp_path, "base")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2 and "a quantized base (gptq)" in result.stderr


@pytest.mark.parametrize(
    ("fields", "size"),
    [
        ({"params": 1_000_000_000}, 12_000_000_000),
        ({"params": 1_000_000_000, "dtype": "bf16"}, 14_000_000_000),
        ({"params": 10, "optimizer": "none", "dtype": "fp16"}, 20),
        ({"size_gb": 2}, 2 << 30),
        ({}, None),
    ],
)
def test_checkpoint_size_estimate(fields, size) -> None:
    assert spec_of(checkpoints=fields).checkpoints.estimated_bytes == size


def test_a_job_whose_checkpoints_cannot_fit_is_refused_with_the_numbers(gpujob, tmp_path):
    (tmp_path / "t.py").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nrun: {entrypoint: t.py}\n"
                    "checkpoints:\n  keep_last: 3\n  params: 70000000000000\n")  # fmt: skip
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert re.search(rf"{spec}:6: disk budget: checkpoints 4 x 78231\d\.\d\d GiB \+ workdir "
                     r"[\d.]+ GiB \+ environment [\d.]+ GiB = [\d.]+ GiB; [\d.]+ GiB free at ",
                     result.stderr)  # fmt: skip
    assert "short by" in result.stderr and "lower checkpoints.keep_last" in result.stderr
