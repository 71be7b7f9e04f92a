"""The GPU catalog through the real CLI, against the Lambda and Vast fakes on threads:
SkyPilot's names for what its recipes ask for, each rented where it is sold."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clouds import BannerBackend, BannerServer, calls, point_at

from infra.fakes import RunningFake, serve_lambda, serve_vast


@pytest.fixture
def fakes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path
) -> Iterator[dict[str, RunningFake]]:
    banner = BannerServer()
    lam, vast = serve_lambda(BannerBackend(banner)), serve_vast(BannerBackend(banner))
    point_at(monkeypatch, tmp_path, lam=lam, vast=vast, banner=banner)
    yield {"lambda": lam, "vast": vast}
    lam.stop()
    vast.stop()
    banner.close()


@pytest.mark.parametrize("asked, provider, sent", [
    ("l4", "vast", {"in": ["L4"]}),
    ("L4:2", "vast", {"in": ["L4"]}),
    ("T4", "vast", {"in": ["Tesla T4"]}),
    ("RTX4090", "vast", {"in": ["RTX 4090"]}),
    ("rtx5090", "vast", {"in": ["RTX 5090"]}),
    ("L40", "vast", {"in": ["L40"]}),
    ("A10", "lambda", None),
    ("A100-80GB:8", "lambda", None),
    ("H100-SXM", "lambda", None),
    ("b200", "lambda", None),
])  # fmt: skip
def test_skypilot_names_rent_where_sold(
    fakes: dict[str, RunningFake], gpujob: Callable, asked: str, provider: str,
    sent: dict | None,
) -> None:  # fmt: skip
    result = gpujob("up", asked, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert provider in result.stdout
    if sent is not None:
        assert "sells none; renting on vast (--provider)" in result.stderr
        assert calls(fakes["vast"], "search_offers")[-1]["body"]["gpu_name"] == sent
    else:
        assert "renting on" not in result.stderr


def test_h100_sxm_is_not_a_pcie_offer(fakes: dict[str, RunningFake], gpujob: Callable) -> None:
    sxm = gpujob("up", "H100-SXM", "--dry-run").stdout
    pcie = gpujob("up", "h100-pcie", "--dry-run").stdout
    assert "gpu_1x_h100_sxm5" in sxm and "h100_pcie" not in sxm
    assert "gpu_1x_h100_pcie" in pcie and "sxm5" not in pcie


@pytest.mark.parametrize("asked, line", [
    ("a10g", "a10g: lambda sells none"),
    ("l4 --provider lambda", "neither"),
])  # fmt: skip
def test_unsold_gpu_says_where_it_is_sold(
    fakes: dict[str, RunningFake], gpujob: Callable, asked: str, line: str
) -> None:
    result = gpujob("up", *asked.split(), "--dry-run")
    assert result.exit_code == 1, result.stderr
    if "provider" in asked:
        assert "vast sells l4 with 1, 2, 4 or 8 per host" in result.stderr
    else:
        assert "neither Lambda nor Vast sells a10g" in result.stderr


def test_a_typo_lists_the_catalog(fakes: dict[str, RunningFake], gpujob: Callable) -> None:
    result = gpujob("up", "l5", "--dry-run")
    assert result.exit_code == 2
    assert "unknown GPU 'l5'" in result.stderr and "l4, l40s, l40, a10, a10g" in result.stderr
