"""`up --count N` against the Vast fake with its rate limits on (scaled down): the launches
share one offer search and the waiters one list call a poll, so none is refused for going too
fast, and every instance is on a machine of its own (an offer rented once)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clouds import calls, vast_instances

from infra.fakes import RunningFake

SCALE = 0.1  # the OAS's seconds between calls, a tenth of them


def test_up_of_four_searches_once_and_polls_with_one_list(
    vast_fake: RunningFake, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUJOB_VAST_CREATE_INTERVAL_S", str(4.5 * SCALE + 0.02))
    monkeypatch.setenv("GPUJOB_POLL_S", str(2.0 * SCALE))
    vast_fake.control.knobs(rate_limits=True, rate_scale=SCALE)
    up = gpujob("up", "h100", "--provider", "vast", "--count", "4", "--yes", "--no-bootstrap")
    assert up.exit_code == 0, up.stderr
    vast_fake.control.knobs(rate_limits=False)  # the test's own reads from here on
    made = vast_instances(vast_fake)
    assert len(made) == 4
    assert len({inst["machine_id"] for inst in made}) == 4  # each offer rented once
    seen = vast_fake.control.requests()
    assert [r for r in seen if r["status"] == 429] == []  # nothing sent too soon
    assert len(calls(vast_fake, "search_offers")) == 1
    assert len(calls(vast_fake, "create_instance")) == 4
    shows = calls(vast_fake, "show_instance")
    lists = calls(vast_fake, "list_instances_v1")
    assert lists and len(shows) < 4, (len(shows), len(lists))
    assert gpujob("down", "--all").exit_code == 0
    assert vast_instances(vast_fake) == []


def test_a_refused_offer_is_searched_again_and_the_next_machine_taken(
    vast_fake: RunningFake, gpujob: Callable
) -> None:
    vast_fake.control.fault(op="create_instance", status=400, code="no_such_ask")
    up = gpujob("up", "h100", "--provider", "vast", "--count", "2", "--yes", "--no-bootstrap")
    assert up.exit_code == 0, up.stderr
    creates = calls(vast_fake, "create_instance")
    assert [c["status"] for c in creates] == [400, 200, 200]
    assert len(calls(vast_fake, "search_offers")) == 2  # read again after the refusal
    made = vast_instances(vast_fake)
    assert len({inst["machine_id"] for inst in made}) == 2
    assert gpujob("down", "--all").exit_code == 0
