"""`gpujob up a100 --provider lambda` against the Lambda fake backed by real lab hosts: it
ends with a host whose sshd answers, and `gpujob down --all` removes that host."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from infra.fakes import LAMBDA_API_KEY, RunningFake, serve_lambda

pytestmark = pytest.mark.lab


@pytest.fixture
def lambda_lab(lab: None, tmp_path: Path) -> Iterator[RunningFake]:
    from infra.fakes.lab_backend import LabBackend

    fake = serve_lambda(LabBackend(tmp_path / "records.json"))
    yield fake
    fake.stop()  # terminates whatever a failed test left


def lambda_instances(fake: RunningFake) -> list[dict]:
    headers = {"Authorization": f"Bearer {LAMBDA_API_KEY}"}
    return requests.get(f"{fake.url}/instances", headers=headers, timeout=10).json()["data"]


def test_up_reaches_ssh_and_down_removes_the_host(
    lambda_lab: RunningFake, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra.lab import user_key
    from launcher.providers.reach import ssh_banner

    monkeypatch.setenv("LAMBDA_API_KEY", LAMBDA_API_KEY)
    monkeypatch.setenv("GPUJOB_LAMBDA_API_URL", lambda_lab.url)
    monkeypatch.setenv("GPUJOB_SSH_KEY", str(user_key()))
    monkeypatch.setenv("GPUJOB_POLL_S", "0.5")
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    result = gpujob("up", "a100", "--provider", "lambda", "--yes", "--timeout", "300")
    assert result.exit_code == 0, result.stderr
    name, _, _, login, _ = result.stdout.splitlines()[-1].split("\t")
    address, port = login.split("@")[1].rsplit(":", 1)
    assert (ssh_banner(address, int(port)) or "").startswith("SSH-2.0-")
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert f"terminated {name}" in down.stdout
    assert [i for i in lambda_instances(lambda_lab) if i["status"] != "terminated"] == []
    assert ssh_banner(address, int(port), timeout=2) is None
