"""Interruptible Vast rentals and each cloud's "this host is lost" verdict, through the real
provider classes talking to the cloud fakes on loopback (the fakes' own control panel plays
the cloud: outbid, exited, offline, preempted, unhealthy, destroyed)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from clouds import PUBLIC_KEY, BannerBackend, BannerServer, calls, point_at, vast_instances

from infra.fakes import RunningFake, serve_lambda, serve_vast
from launcher.clouds.base import Instance, instance_name, launch_cheapest, parse_gpu_request
from launcher.clouds.loss import HostLoss, loss_verdict


class Fakes(NamedTuple):
    vast: RunningFake
    lam: RunningFake


def launched(provider: str, spot: bool = False) -> tuple[Any, Instance]:
    """One instance, rented as `up` rents it (the fakes have two 1x H100 offers on Vast)."""
    from launcher.clouds.registry import get_provider

    cloud = get_provider(provider)
    gpu = "a100" if provider == "lambda" else "h100"
    request = parse_gpu_request(gpu, spot=spot)
    return cloud, launch_cheapest(cloud, request, instance_name(gpu), PUBLIC_KEY)


def rented(provider: str, spot: bool = False) -> tuple[Any, Instance]:
    """One running instance."""
    cloud, inst = launched(provider, spot)
    return cloud, cloud.wait_until_running(inst.id, 30)


# --- the loss verdict ------------------------------------------------------------------------
@pytest.mark.parametrize("provider", ["lambda", "vast"])
def test_running_and_booting_instances_are_not_lost(
    clouds: dict[str, RunningFake], provider: str
) -> None:
    _, inst = rented(provider)
    assert inst.status == "running" and loss_verdict(inst) is None
    clouds[provider].control.knobs(boot_forever=True)
    cloud, made = launched(provider)
    assert made.status == "booting" and loss_verdict(made) is None  # `launch`'s own answer
    booting = cloud.describe(made.id)
    assert booting.status == "booting" and loss_verdict(booting) is None


@pytest.mark.parametrize(
    ("change", "kind", "words"),
    [
        ({"spot_interrupted": True}, "preempted",
         "was outbid: intended, current and next state stopped"),
        ({"actual_status": "exited", "status_msg": "container exited with code 137"}, "preempted",
         "stopped without gpujob asking (actual_status exited: container exited with code 137"),
        ({"actual_status": "offline"}, "host_lost", "is offline: its host stopped answering Vast"),
        ({"actual_status": "unknown"}, "host_lost", "is unknown: its host stopped answering Vast"),
        ({"actual_status": "created", "status_msg": "Error: OCI runtime create failed: x"},
         "host_lost", "its container failed to start (actual_status created: Error: OCI runtime"),
    ],
)  # fmt: skip
def test_vast_verdicts_from_what_vast_says(
    clouds: dict[str, RunningFake], change: dict, kind: str, words: str
) -> None:
    spot = "spot_interrupted" in change
    cloud, inst = rented("vast", spot=spot)
    clouds["vast"].control.instance(inst.id, **change)
    verdict = loss_verdict(cloud.describe(inst.id))
    assert verdict is not None and verdict.kind == kind, verdict
    assert verdict.reason.startswith(f"vast: instance {inst.id}")
    assert words in verdict.reason, verdict.reason


def test_a_vast_stop_gpujob_asked_for_is_no_loss(clouds: dict[str, RunningFake]) -> None:
    """As a host's autostop stops itself: Vast's own stop call."""
    import requests

    from infra.fakes import VAST_API_KEY

    cloud, inst = rented("vast")
    auth = {"Authorization": f"Bearer {VAST_API_KEY}"}
    stop = requests.put(f"{clouds['vast'].url}/instances/{inst.id}/", json={"state": "stopped"},
                        headers=auth, timeout=10)  # fmt: skip
    assert stop.ok, stop.text
    now = cloud.describe(inst.id)
    assert now.cloud_status["intended_status"] == "stopped"
    assert loss_verdict(now, stop_asked=True) is None
    unasked = loss_verdict(now)
    assert unasked is not None and unasked.kind == "preempted", unasked


def test_a_destroyed_vast_instance_is_lost(clouds: dict[str, RunningFake]) -> None:
    cloud, inst = rented("vast")
    cloud.terminate(inst.id)
    assert loss_verdict(cloud.describe(inst.id)) == HostLoss(
        "host_lost", f"vast: instance {inst.id} is gone (Vast no longer knows it)"
    )


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        ("preempted", ("preempted", "was preempted (status preempted)")),
        ("unhealthy",
         ("host_lost", "is unhealthy (status unhealthy: Lambda's health checks fail)")),
        ("active", None),
    ],
)  # fmt: skip
def test_lambda_verdicts_from_its_status(
    clouds: dict[str, RunningFake], status: str, verdict: tuple[str, str] | None
) -> None:
    cloud, inst = rented("lambda")
    clouds["lambda"].control.instance(inst.id, status=status)
    found = loss_verdict(cloud.describe(inst.id))
    expected = verdict and HostLoss(verdict[0], f"lambda: instance {inst.id} {verdict[1]}")
    assert found == expected


def test_a_terminated_lambda_instance_is_lost_then_gone(clouds: dict[str, RunningFake]) -> None:
    """Terminating, terminated (listed once), then 404. The fake turns `terminated` only once
    its worker thread has let the host go, which a loaded machine can hold up: polled until
    gone, with a deadline rather than a count of calls."""
    cloud, inst = rented("lambda")
    cloud.terminate(inst.id)
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while not seen or not seen[-1].startswith("is gone"):
        assert time.monotonic() < deadline, f"not gone after 30 s: {seen[-3:]}"
        verdict = loss_verdict(cloud.describe(inst.id))
        assert verdict is not None and verdict.kind == "host_lost"
        seen.append(verdict.reason.removeprefix(f"lambda: instance {inst.id} "))
        if not seen[-1].startswith("is gone"):
            time.sleep(0.02)
    assert seen[-1] == "is gone (Lambda no longer knows it)"
    assert all(s.startswith("was terminated (status termina") for s in seen[:-1]), seen


# --- interruptible Vast rentals -------------------------------------------------------------
@pytest.fixture
def market(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path) -> Iterator[Fakes]:
    """Both fakes, Vast's hosts answering SSH with a banner so that `up` completes."""
    banner = BannerServer()
    vast, lam = serve_vast(BannerBackend(banner)), serve_lambda(BannerBackend(banner))
    point_at(monkeypatch, tmp_path, vast=vast, lam=lam, banner=banner)
    yield Fakes(vast, lam)
    vast.stop()
    lam.stop()
    banner.close()


H100_PCIE, H100_SXM = "12345610", "12345609"  # the fake's 1x H100 offers: min_bid 1.08, 1.32
DISK_HOUR = 20 * 0.15 / 30 / 24  # 20 GB (gpujob's least on Vast) at $0.15/GB/month


def test_spot_rents_at_the_offers_min_bid(market: Fakes, gpujob: Callable) -> None:
    result = gpujob("up", "h100", "--provider", "vast", "--spot", "--yes", "--no-bootstrap")
    assert result.exit_code == 0, result.stderr
    searches = calls(market.vast, "search_offers")
    assert searches and all(s["body"]["type"] == "bid" for s in searches)
    # the 64 Vast answers are the cheapest bids, not the cheapest on-demand prices
    assert all(s["body"]["order"] == [["min_bid", "asc"]] for s in searches)
    (create,) = calls(market.vast, "create_instance")
    assert create["path"].endswith(f"/asks/{H100_PCIE}/") and create["body"]["price"] == 1.08
    (inst,) = vast_instances(market.vast)
    assert inst["is_bid"] is True and inst["actual_status"] == "running"
    assert "bid $/h" in result.stdout and "1.080" in result.stdout  # the offers table
    assert f"${1.08 + DISK_HOUR:.2f}/h" in result.stdout.splitlines()[-1]
    assert gpujob("down", "--all").exit_code == 0


def test_on_demand_sends_no_bid(market: Fakes, gpujob: Callable) -> None:
    result = gpujob("up", "h100", "--provider", "vast", "--yes", "--no-bootstrap")
    assert result.exit_code == 0, result.stderr
    (search,) = calls(market.vast, "search_offers")[-1:]
    assert search["body"]["type"] == "on-demand" and search["body"]["order"] == [
        ["dph_total", "asc"]
    ]
    (create,) = calls(market.vast, "create_instance")
    assert create["body"]["price"] is None
    assert vast_instances(market.vast)[0]["is_bid"] is False
    assert "bid $/h" not in result.stdout
    assert gpujob("down", "--all").exit_code == 0


def test_max_price_caps_the_bid_and_the_dry_run_shows_it(market: Fakes, gpujob: Callable) -> None:
    result = gpujob("up", "h100", "--provider", "vast", "--spot", "--max-price", "1.2",
                    "--dry-run")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "1 offer(s)" in result.stdout and "1.080" in result.stdout  # the SXM's 1.32 is over
    search = calls(market.vast, "search_offers")[-1]["body"]
    assert search["min_bid"] == {"lte": 1.2} and "dph_total" not in search  # Vast skips it
    assert "1.320" not in result.stdout
    assert (
        f"dry run: would launch 1 x 1x H100 PCIE in Ontario, CA at ${1.08 + DISK_HOUR:.2f}/h "
        "each (interruptible: bid $1.080/h; outbid, the host is stopped); nothing started"
    ) in result.stderr
    assert calls(market.vast, "create_instance") == []
    below = gpujob("up", "h100", "--provider", "vast", "--spot", "--max-price", "1.0", "--yes")
    assert below.exit_code == 1
    assert "vast: no offer for h100:1 under $1.00/h" in below.stderr
    assert calls(market.vast, "create_instance") == []


def test_a_bid_lost_between_search_and_create_is_destroyed_and_the_next_offer_rented(
    market: Fakes, gpujob: Callable
) -> None:
    market.vast.control.call("POST", "/offers", {"outbid": {H100_PCIE: 1.5}})
    result = gpujob("up", "h100", "--provider", "vast", "--spot", "--yes", "--no-bootstrap")
    assert result.exit_code == 0, result.stderr
    creates = calls(market.vast, "create_instance")
    assert [c["path"].rsplit("/", 2)[-2] for c in creates] == [H100_PCIE, H100_SXM]
    assert [c["body"]["price"] for c in creates] == [1.08, 1.32]
    lost = calls(market.vast, "destroy_instance")
    assert len(lost) == 1  # the stopped instance the low bid left, not kept billing its disk
    (inst,) = vast_instances(market.vast)
    assert inst["machine_id"] == 88009 and inst["is_bid"] is True
    assert gpujob("down", "--all").exit_code == 0


@pytest.mark.parametrize(
    "args",
    [
        ("up", "a100", "--provider", "lambda", "--spot", "--yes"),
        ("up", "a100", "--provider", "lambda", "--spot", "--dry-run"),
        ("submit", "jobs/quickstart.yaml", "--up", "a100", "--provider", "lambda", "--allow-cpu",
         "--set", "resources.use_spot=true", "--dry-run"),
    ],
)  # fmt: skip
def test_lambda_refuses_spot_before_any_call(
    market: Fakes, gpujob: Callable, args: tuple[str, ...]
) -> None:
    result = gpujob(*args)
    assert result.exit_code == 2, result.stderr
    assert (
        "--spot (resources.use_spot): lambda rents no interruptible hosts; nothing was rented"
        in result.stderr
    )
    assert "leave it out to rent on demand, or use --provider vast" in result.stderr
    assert market.lam.control.requests() == []


def test_a_skypilot_task_with_use_spot_rents_interruptible_on_vast(
    market: Fakes, gpujob: Callable, tmp_path: Path
) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("resources:\n  use_spot: true\n  accelerators: H100:1\nrun: echo hi\n")
    from launcher.spec.load import load_job_spec

    assert load_job_spec(task).spec.resources.use_spot is True
    result = gpujob("submit", str(task), "--up", "h100", "--provider", "vast", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert all(s["body"]["type"] == "bid" for s in calls(market.vast, "search_offers"))
    assert "bid $/h" in result.stderr  # the offers: stdout is the plan's (its --json)


# --- spot where nothing is rented ------------------------------------------------------------
@pytest.mark.parametrize(
    ("on", "runs_on"), [((), "this machine"), (("--on", "me@127.0.0.1:1"), "the --on hosts")]
)
def test_use_spot_without_up_is_said_to_have_no_effect(
    gpujob: Callable, tmp_path: Path, on: tuple[str, ...], runs_on: str
) -> None:
    """A spec's `use_spot` where gpujob rents nothing (a local run, --on): a warning naming
    the line, and the run goes on as it would without it."""
    (tmp_path / "prog.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: tiny\nimage: host\nresources:\n  use_spot: true\n"
                    "run:\n  entrypoint: prog.py\n")  # fmt: skip
    result = gpujob("submit", str(spec), *on, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert (
        f"gpujob: warning: {spec}:4: resources.use_spot has no effect without --up (nothing "
        f"is rented); the job runs on {runs_on}\n"
    ) in result.stderr
    plain = gpujob("submit", str(spec), *on, "--dry-run", "--set", "resources.use_spot=false")
    assert plain.exit_code == 0 and "use_spot" not in plain.stderr, plain.stderr


def test_up_host_refuses_spot(gpujob: Callable, state_dir: Path) -> None:
    result = gpujob("up", "--host", "me@127.0.0.1:1", "--spot")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines() == [
        "gpujob: error: --spot is for hosts gpujob rents; --host names a machine you have, "
        "which no cloud can take back. leave out --spot: it applies to a host `gpujob up GPU "
        "--provider vast` rents"
    ]
    assert not state_dir.exists()  # nothing recorded, nobody contacted
