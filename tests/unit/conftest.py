"""Fixtures the unit tests share: both cloud fakes served on loopback (no hosts behind them),
gpujob pointed at them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from clouds import BannerBackend, BannerServer, point_at

from infra.fakes import RunningFake, serve_lambda, serve_vast
from infra.fakes.null_backend import NullBackend


@pytest.fixture
def clouds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
           state_dir: Path) -> Iterator[dict[str, RunningFake]]:  # fmt: skip
    lam, vast = serve_lambda(NullBackend()), serve_vast(NullBackend())
    point_at(monkeypatch, tmp_path, lam=lam, vast=vast)
    yield {"lambda": lam, "vast": vast}
    lam.stop()
    vast.stop()


@pytest.fixture
def vast_fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
              state_dir: Path) -> Iterator[RunningFake]:  # fmt: skip
    """The Vast fake alone, its hosts answering with an SSH banner (`up` finishes)."""
    banner = BannerServer()
    fake = serve_vast(BannerBackend(banner))
    point_at(monkeypatch, tmp_path, vast=fake)
    yield fake
    fake.stop()
    banner.close()
