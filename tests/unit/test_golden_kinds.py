"""Golden dry runs for each kind of target besides this machine (test_dry_run.py has the local
quickstart): an SSH host of hosts.yaml, hosts rented with `--up` from the Lambda fake (served
on loopback: the offers are the fake's), and a SLURM cluster. None is contacted; what a dry
run cannot know shows as a placeholder (`<home>`, `<new lambda host 0>`, `<its ip>`).
`GPUJOB_UPDATE_GOLDEN=1` rewrites them.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clouds import point_at
from planning import REPO
from test_dry_run import GOLDEN, fixed_dirs, normalised  # noqa: F401 (fixed_dirs: a fixture)

from infra.fakes import RunningFake, serve_lambda
from infra.fakes.null_backend import NullBackend

HOSTS = """\
hosts:
  - {name: gpu1, address: 192.0.2.10, user: me, port: 2222}
  - {name: hpc, type: slurm, address: login.example, user: me, partition: gpu, account: lab,
     shared: /scratch/me}
"""


@pytest.fixture
def hosts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    monkeypatch.setenv("GPUJOB_HOSTS_FILE", str(path))
    return path


@pytest.fixture
def lambda_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningFake]:
    fake = serve_lambda(NullBackend())
    point_at(monkeypatch, tmp_path, lam=fake)
    yield fake
    fake.stop()


def matches_golden(stdout: str, name: str) -> None:
    """Machine-specific parts out: the checkout, and the hash of its path that names the
    host's lasting copy of the workdir."""
    workdir = str(REPO / "jobs" / "quickstart")
    digest = hashlib.sha256(workdir.encode()).hexdigest()[:10]
    actual = normalised(stdout).replace(digest, "<hash of its path>")
    path = GOLDEN / name
    if os.environ.get("GPUJOB_UPDATE_GOLDEN") == "1":
        path.write_text(actual)
    assert actual == path.read_text(), (
        f"the dry run changed; if that is intended: GPUJOB_UPDATE_GOLDEN=1 pytest {__file__}"
    )


KINDS = {
    "ssh": ["--on", "gpu1"],
    "lambda": ["--up", "a100", "--allow-cpu"],
    "slurm": ["--on", "slurm:hpc"],
}


@pytest.mark.parametrize("flags", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_of_target_has_a_golden_dry_run(
    fixed_dirs: Callable,  # noqa: F811
    hosts_file: Path,
    lambda_fake: RunningFake,
    tmp_path: Path,
    kind: str,
    flags: list[str],
) -> None:
    result = fixed_dirs("submit", "jobs/quickstart.yaml", "--dry-run", *KINDS[kind], *flags,
                        "--job-id", f"{kind}-golden")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert not Path("/state").exists()
    suffix = "json" if flags else "txt"
    matches_golden(result.stdout, f"{kind}-dry-run.{suffix}")
    if kind == "lambda":  # nothing rented: the fake saw offers asked for, no launch
        assert not [r for r in lambda_fake.control.requests() if r["op"] == "launch"]
