"""`gpujob image build lab-cpu --push`: a real image from the lab base and a verified
wheelhouse, pushed to the lab registry, pulled by a lab host's own dockerd, running the
quickstart under torchrun; and a wheel that fails its hash stops the build before any push.
The lab's job image is this image plus `USER root` (infra/lab/job_image.py builds it through
the same code), so on a machine whose lab is up the build here finds it built, as a second
`image build` of one lock does (the lab's build of it is the cold one)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from labtools import REPO, docker

DEFINITIONS = REPO / "launcher" / "images" / "definitions"

pytestmark = pytest.mark.lab

LAB_WHEELHOUSE = Path("/tmp/gpujob-lab/wheelhouse/lab-cpu/wheels")


@pytest.fixture
def wheel_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wheels the lab already downloaded are taken (and verified) instead of fetched again."""
    if LAB_WHEELHOUSE.is_dir():
        monkeypatch.setenv("GPUJOB_WHEEL_DIRS", str(LAB_WHEELHOUSE))


def test_lab_cpu_image_is_built_pushed_pulled_and_runs_the_quickstart(
    lab, docker_hosts, wheel_dirs, gpujob, monkeypatch
) -> None:
    from infra.lab import registry
    from launcher.images.commands import read_lock
    from launcher.images.running import image_lock_hash

    monkeypatch.delenv("GPUJOB_CACHE_DIR")  # the machine's wheel cache: verified on entry
    _, lock = read_lock("lab-cpu")
    result = gpujob("image", "build", "lab-cpu", "--push", registry.push_address())
    assert result.exit_code == 0, result.stderr
    tag = lock.lock_hash[:16]
    assert result.stdout.strip().endswith(f"/gpujob/lab-cpu:{tag}")
    assert tag in registry.tags("gpujob/lab-cpu")
    assert image_lock_hash(f"gpujob/lab-cpu:{tag}") == lock.lock_hash  # what doctor reports

    host = docker_hosts[0]
    ref = f"{registry.address()}/gpujob/lab-cpu:{tag}"
    pulled = docker(host, "pull", "-q", ref)
    assert pulled.returncode == 0, pulled.stderr
    labels = json.loads(
        docker(host, "image", "inspect", "-f", "{{json .Config.Labels}}", ref).stdout
    )
    assert labels["gpujob.image.lock"] == lock.lock_hash

    probe = (
        "import os, torch, transformers; print(torch.__version__, transformers.__version__,"
        " os.getuid(), os.environ['GPUJOB_IMAGE_LOCK'])"
    )
    done = docker(host, "run", "--rm", "--network", "host", ref, "python", "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2.13.0+cpu", "5.23.0", "1000", lock.lock_hash]

    # The job goes into the container through the engine's API (`docker cp`), not a bind
    # mount of this checkout: the host's dockerd sees its own /root and /tmp, not this
    # machine's, so a bind mount would only work for a checkout the host happens to see.
    made = docker(
        host,
        "create",
        "--network",
        "host",
        "-e",
        "OMP_NUM_THREADS=1",
        ref,
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        "2",
        "/job/train.py",
        "--steps",
        "6",
        "--save-every",
        "3",
        "--checkpoint-dir",
        "/tmp/ckpt",
        "--log-every",
        "2",
    )
    assert made.returncode == 0, made.stderr
    container = made.stdout.strip()
    try:
        copied = docker(host, "cp", str(REPO / "jobs" / "quickstart"), f"{container}:/job")
        assert copied.returncode == 0, copied.stderr
        run = docker(host, "start", "--attach", container)
    finally:
        docker(host, "rm", "--force", container)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert re.search(r"^final loss [0-9.]+$", run.stdout + run.stderr, re.M), run.stdout[-2000:]


def test_a_wheel_failing_its_hash_stops_the_build_and_nothing_is_pushed(
    lab, tmp_path: Path, wheel_dirs, gpujob, monkeypatch
) -> None:
    from infra.lab import registry
    from launcher.images.lock import parse_lock

    monkeypatch.delenv("GPUJOB_CACHE_DIR")  # the other wheels come from the machine's cache
    name = f"hashcheck-{uuid.uuid4().hex[:8]}"
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(DEFINITIONS / "catalog.json", images)
    text = (DEFINITIONS / "lab-cpu.yaml").read_text().replace("name: lab-cpu", f"name: {name}")
    (images / f"{name}.yaml").write_text(text)
    lock = parse_lock((DEFINITIONS / "lab-cpu.lock").read_text(), "lab-cpu.lock")
    packages = [replace(p, sha256="0" * 64) if p.name == "mdurl" else p for p in lock.packages]
    tampered = replace(
        lock,
        name=name,
        packages=packages,
        definition_sha256=hashlib.sha256(text.encode()).hexdigest(),
    )
    (images / f"{name}.lock").write_text(tampered.to_text())

    result = gpujob(
        "image", "build", str(images / f"{name}.yaml"), "--push", registry.push_address()
    )
    assert result.exit_code == 1
    assert "mdurl-0.1.2-py3-none-any.whl: sha256" in result.stderr
    assert "nothing was built or pushed" in result.stderr
    assert registry.tags(f"gpujob/{name}") == []
    assert os.environ.get("GPUJOB_REGISTRY_PASSWORD") is None
