"""rclone itself reads back the rclone.conf gpujob wrote: every value literal, nothing
interpreted (seed 000's backticks are refused, see tests/unit/test_storage_rules.py)."""

from __future__ import annotations

import json
import os
import stat
import subprocess

KEY_ID, SECRET = "AK#x ; y", "a$(id)'\"b"


def test_rclone_reads_the_written_conf_back_value_for_value(gpujob, tmp_path, monkeypatch):
    (tmp_path / "config.yaml").write_text(
        "remotes:\n  lab:\n    provider: Minio\n    endpoint: http://127.0.0.1:9000\n"
        "    bucket: ckpts\n    access_key_env: GJ_AK\n    secret_key_env: GJ_SK\n"
    )
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("GJ_AK", KEY_ID)
    monkeypatch.setenv("GJ_SK", SECRET)
    shown = gpujob("storage", "rclone-config", "lab")
    assert SECRET not in shown.stdout and "SECRET_ACCESS_KEY=***" in shown.stdout

    conf = tmp_path / "rclone.conf"
    planned = gpujob("storage", "rclone-config", "lab", "--write", str(conf), "--dry-run")
    assert planned.exit_code == 0 and not conf.exists() and SECRET not in planned.stdout
    result = gpujob("storage", "rclone-config", "lab", "--write", str(conf))
    assert result.exit_code == 0, result.stderr
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600

    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    dump = subprocess.run(
        ["rclone", "--config", str(conf), "config", "dump"], env=env, capture_output=True, text=True
    )
    assert dump.returncode == 0, dump.stderr
    seen = json.loads(dump.stdout)["gpujob_lab"]
    assert (seen["access_key_id"], seen["secret_access_key"]) == (KEY_ID, SECRET)
    assert seen["endpoint"] == "http://127.0.0.1:9000" and seen["provider"] == "Minio"
