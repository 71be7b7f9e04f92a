"""Where SkyPilot would rent is a preference, and candidate resources become one: through
the real CLI (`submit --dry-run`, in-process), `--up` against the Lambda fake on a thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clouds import BannerBackend, BannerServer, point_at

from infra.fakes import serve_lambda

RUN = "run: echo $SKYPILOT_NUM_GPUS_PER_NODE\n"


@pytest.fixture
def lam(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path) -> Iterator[None]:
    banner = BannerServer()
    fake = serve_lambda(BannerBackend(banner))
    point_at(monkeypatch, tmp_path, lam=fake, banner=banner)
    yield
    fake.stop()
    banner.close()


def write(tmp_path: Path, resources: str) -> str:
    path = tmp_path / "task.yaml"
    path.write_text(f"resources:\n{resources}{RUN}")
    return str(path)


@pytest.mark.parametrize("resources, said", [
    ("  cloud: gcp\n", "resources.cloud: gcp: a preference gpujob does not rent on"),
    ("  infra: k8s/my-context\n", "resources.infra: k8s/my-context: a preference gpujob"),
    ("  infra: aws/us-east-1\n  accelerators: A100\n", "resources.infra: aws/us-east-1:"),
    ("  region: us-central1\n", "resources.region: us-central1: a preference"),
    ("  cloud: lambda\n", "resources.cloud: the cloud is chosen at `submit --up GPU"),
])  # fmt: skip
def test_where_to_rent_is_a_warning_and_the_job_plans(
    tmp_path: Path, gpujob: Callable, resources: str, said: str
) -> None:
    result = gpujob("submit", write(tmp_path, resources), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert f"warning: {tmp_path}/task.yaml:2: {said}" in result.stderr


@pytest.mark.parametrize("resources, taken, said", [
    ("  accelerators: [L4:1, A10G:1, A100:1]\n", "L4:1",
     "resources.accelerators: candidates L4:1, A10G:1, A100:1: gpujob takes L4:1, the first "
     "in the task's order"),
    ("  accelerators: {L4: 1, A100: 2}\n", "L4:1",
     "resources.accelerators: candidates L4:1, A100:2: gpujob takes L4:1, the first written"),
    ("  accelerators: 'L4:2, A100:4'\n", "L4:2", "candidates L4:2, A100:4: gpujob takes L4:2"),
    ("  use_spot: false\n  any_of:\n    - accelerators: H100:8\n      use_spot: true\n"
     "    - accelerators: A100:8\n", "H100:8",
     "resources.any_of: candidates H100:8, A100:8: gpujob takes H100:8"),
    ("  accelerators: A100:8\n  ordered:\n    - cloud: gcp\n    - cloud: aws\n", "A100:8",
     "resources.ordered: candidates A100:8, A100:8: gpujob takes A100:8"),
])  # fmt: skip
def test_candidates_become_the_first_said_in_the_dry_run(
    tmp_path: Path, gpujob: Callable, resources: str, taken: str, said: str
) -> None:
    result = gpujob("submit", write(tmp_path, resources), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert said in result.stderr
    assert f"-> resources.accelerators: {taken}" in result.stderr
    gpus = taken.partition(":")[2]
    assert f"SKYPILOT_NUM_GPUS_PER_NODE={gpus}" in result.stdout.replace("export ", "")


def test_up_takes_the_candidate_of_its_gpu(tmp_path: Path, gpujob: Callable, lam: None) -> None:
    path = write(tmp_path, "  any_of:\n    - accelerators: L4:1\n    - accelerators: A100:8\n")
    result = gpujob("submit", path, "--dry-run", "--up", "a100")
    assert result.exit_code == 0, result.stderr
    assert "gpujob takes A100:8, the candidate of `--up a100`" in result.stderr
    assert "renting a100:8" in result.stderr
    assert "SKYPILOT_NUM_GPUS_PER_NODE=8" in result.stdout.replace("export ", "")


@pytest.mark.parametrize("cap, flags, code, said", [
    ("0.5", (), 1, "no offer for a100:1 under $0.50/h"),
    ("0.5", ("--max-price", "2"), 0, "gpu_1x_a100"),
    ("2", (), 0, "resources.max_hourly_cost: offers up to $2.00/hour"),
])  # fmt: skip
def test_max_hourly_cost_caps_the_offer(
    tmp_path: Path, gpujob: Callable, lam: None, cap: str, flags: tuple[str, ...], code: int,
    said: str,
) -> None:  # fmt: skip
    path = write(tmp_path, f"  accelerators: A100\n  max_hourly_cost: {cap}\n")
    result = gpujob("submit", path, "--dry-run", "--up", "a100", *flags)
    assert result.exit_code == code, result.stderr
    assert said in result.stderr + result.stdout
