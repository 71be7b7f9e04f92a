"""`gpujob submit --up` asks the job image's registry (the lab's real one) before renting: a
name the registry does not have is refused with nothing rented; one it has goes on to rent."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.fakes import LAMBDA_API_KEY, RunningFake, serve_lambda
from infra.fakes.null_backend import NullBackend

pytestmark = pytest.mark.lab
GPUJOB = str(Path(sys.executable).with_name("gpujob"))


@pytest.fixture
def fake(lab: None) -> Iterator[RunningFake]:
    running = serve_lambda(NullBackend())  # nothing is to be rented: no host behind it
    running.control.knobs(boot_forever=True)  # a rent that happens stays `booting`
    yield running
    running.stop()


def submit(fake: RunningFake, tmp_path: Path, image: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: t\nimage: {image}\nworkdir: work\nrun: {{entrypoint: train.py}}\n")
    from infra.lab import user_key

    env = {**os.environ, "GPUJOB_STATE_DIR": str(tmp_path / "state"),
           "GPUJOB_SSH_KEY": str(user_key()),
           "LAMBDA_API_KEY": LAMBDA_API_KEY, "GPUJOB_LAMBDA_API_URL": fake.url,
           "GPUJOB_POLL_S": "0.05", "GPUJOB_RETRY_BASE_S": "0.01"}  # fmt: skip
    argv = [GPUJOB, "submit", str(spec), "--up", "a100", "--allow-cpu", "--detach"]
    # A rent that got through would wait for SSH on a host that never boots: the short
    # timeout only bounds that wrong path, and the launch call would still show in the log.
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def launches(fake: RunningFake) -> list[dict[str, Any]]:
    return [r for r in fake.control.requests() if r["op"] == "launch"]


def test_an_image_the_registry_lacks_is_refused_with_nothing_rented(
    fake: RunningFake, tmp_path: Path
) -> None:
    from infra.lab import registry

    done = submit(fake, tmp_path, f"{registry.address()}/gpujob-lab/no-such-image:missing")
    assert done.returncode == 2, done.stderr
    assert "no such image; nothing was rented" in done.stderr
    assert launches(fake) == []


def test_an_image_the_registry_has_passes_the_check(fake: RunningFake, tmp_path: Path) -> None:
    from infra.lab import base_image, registry

    image = f"{registry.address()}/{base_image.TAG}"
    fake.control.fault("error", op="launch", status=503, count=100)
    done = submit(fake, tmp_path, image)
    assert f"before renting: image {image}: present" in done.stderr, done.stderr
    assert launches(fake), done.stderr  # the checks passed: the rent was tried (and refused)
