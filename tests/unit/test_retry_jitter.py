"""clouds/http.py: a retry waits its backoff stretched at random, so the calls one command
makes at once (8 creates, 8 deletes) that a per-endpoint limit answered 429 together do not
all come back at the same instant."""

from __future__ import annotations

from launcher.clouds.http import jittered


def test_a_cloud_retry_waits_its_backoff_to_twice_it_at_random() -> None:
    waits = [jittered(4.0) for _ in range(200)]
    assert all(4.0 <= wait < 8.0 for wait in waits)
    assert len({round(wait, 3) for wait in waits}) > 100  # spread, not one instant for all
