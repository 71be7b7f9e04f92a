"""`up --count N` and `down --all` against the Vast fake with its rate limits on (scaled
down): the launches share one offer search, the waiters one list call a poll, creates and
destroys are spaced, so none is refused for going too fast, and every instance is on a
machine of its own (an offer rented once)."""

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
    monkeypatch.setenv("GPUJOB_VAST_DESTROY_INTERVAL_S", str(3.0 * SCALE + 0.02))
    monkeypatch.setenv("GPUJOB_POLL_S", str(2.0 * SCALE))
    vast_fake.control.knobs(rate_limits=True, rate_scale=SCALE)
    up = gpujob("up", "h100", "--provider", "vast", "--count", "4", "--yes", "--no-bootstrap")
    assert up.exit_code == 0, up.stderr
    made = [c["path"] for c in calls(vast_fake, "create_instance")]
    assert len(made) == len(set(made)) == 4  # each offer (one machine) rented once
    shows = calls(vast_fake, "show_instance")
    lists = calls(vast_fake, "list_instances_v1")
    assert lists and len(shows) < 4, (len(shows), len(lists))  # waited for with lists
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert len(calls(vast_fake, "destroy_instance")) == 4
    seen = vast_fake.control.requests()
    limited = {r["op"] for r in seen if r["status"] == 429}  # down's own reads may be
    assert not limited & {"search_offers", "create_instance", "destroy_instance", "show_instance"}
    assert len(calls(vast_fake, "search_offers")) == 1
    vast_fake.control.knobs(rate_limits=False)  # the test's own read
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
