"""`gpujob doctor` checks every remote of the user's config from the host, for real: moto
answers for one, a closed port for the other, and each gets its own verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import free_port

GPUJOB = str(Path(sys.executable).with_name("gpujob"))


def test_doctor_probes_each_remote_and_names_the_one_that_fails(remote: dict[str, str]) -> None:
    config = Path(remote["config"]) / "config.yaml"
    config.write_text(config.read_text() + (
        "  down:\n    provider: Other\n"
        f"    endpoint: http://127.0.0.1:{free_port()}\n    region: us-east-1\n"
        f"    bucket: {remote['bucket']}\n"
        "    access_key_env: GJ_TEST_KEY_ID\n    secret_key_env: GJ_TEST_SECRET\n"
    ))  # fmt: skip
    done = subprocess.run([GPUJOB, "doctor", "local", "--json"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    stages = {v["stage"]: v for v in json.loads(done.stdout)}
    assert stages["s3 t"]["verdict"] == "ok", stages["s3 t"]
    assert remote["bucket"] in stages["s3 t"]["detail"]
    assert stages["s3 down"]["verdict"] == "fail"
    assert "list the bucket" in stages["s3 down"]["detail"]
    assert done.returncode == 1
