"""Fixtures for the API-shape tests: each fake on a thread of the test process, with the
null backend (no hosts, no root), and an authenticated `requests` session for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from infra.fakes import LAMBDA_API_KEY, VAST_API_KEY, RunningFake, serve_lambda, serve_vast
from infra.fakes.null_backend import NullBackend


@pytest.fixture
def lambda_fake() -> Iterator[RunningFake]:
    fake = serve_lambda(NullBackend())
    yield fake
    fake.stop()


@pytest.fixture
def lam(lambda_fake: RunningFake) -> requests.Session:
    """A session that talks to the Lambda fake like a client: Bearer key, JSON."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {LAMBDA_API_KEY}"
    session.base = lambda_fake.url  # type: ignore[attr-defined]
    return session


@pytest.fixture
def vast_fake() -> Iterator[RunningFake]:
    fake = serve_vast(NullBackend())
    yield fake
    fake.stop()


@pytest.fixture
def vast(vast_fake: RunningFake) -> requests.Session:
    """A session that talks to the Vast fake like the CLI: Bearer key, trailing slashes."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {VAST_API_KEY}"
    session.base = vast_fake.url  # type: ignore[attr-defined]
    return session
