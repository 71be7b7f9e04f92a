"""`gpujob up/down --provider lambda` against the Lambda fake on a thread (no root, fast)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from clouds import (
    PUBLIC_KEY,
    BannerBackend,
    BannerServer,
    calls,
    lambda_instances,
    point_at,
)

from infra.fakes import LAMBDA_API_KEY, RunningFake, serve_lambda

LIVE = {"booting", "active", "unhealthy"}
NAMED = re.compile(r"gpujob-[0-9a-f]{8}-a100-[0-9a-f]{6}")  # the tag, our owner, the GPU


@pytest.fixture
def banner() -> Iterator[BannerServer]:
    server = BannerServer()
    yield server
    server.close()


@pytest.fixture
def fake(banner: BannerServer) -> Iterator[RunningFake]:
    running = serve_lambda(BannerBackend(banner))
    yield running
    running.stop()


@pytest.fixture
def env(fake: RunningFake, banner: BannerServer, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path, state_dir: Path) -> RunningFake:  # fmt: skip
    point_at(monkeypatch, tmp_path, lam=fake, banner=banner)
    return fake


def live(fake: RunningFake) -> list[dict]:
    return [i for i in lambda_instances(fake) if i["status"] in LIVE]


def test_up_then_down_leaves_nothing(env: RunningFake, gpujob: Callable) -> None:
    result = gpujob("up", "a100", "--count", "2", "--yes", "--no-bootstrap")
    assert result.exit_code == 0, result.stderr
    hosts = [line for line in result.stdout.splitlines() if NAMED.match(line)]
    assert len(hosts) == 2
    assert [i["status"] for i in live(env)] == ["active", "active"]
    assert all(NAMED.fullmatch(i["name"]) for i in live(env))
    shown = json.loads(gpujob("status", "--json").stdout)["hosts"]
    assert sorted(h["name"] for h in shown) == sorted(line.split("\t")[0] for line in hosts)
    assert all(h["price_per_hour"] > 0 and h["cost_so_far"] >= 0 for h in shown)
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert len(re.findall(rf"terminated {NAMED.pattern}", down.stdout)) == 2
    assert live(env) == []
    assert json.loads(gpujob("status", "--json").stdout)["hosts"] == []


def test_invalid_key_is_lambdas_message_on_one_line(
    env: RunningFake, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMBDA_API_KEY", "secret_wrong_key.123")
    result = gpujob("up", "a100", "--yes", "--no-bootstrap")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "API key was invalid, expired, or deleted (global/invalid-api-key)" in result.stderr
    assert "secret_wrong_key" not in result.stderr


def test_unknown_gpu_lists_the_known_ones(env: RunningFake, gpujob: Callable) -> None:
    result = gpujob("up", "a1000", "--yes", "--no-bootstrap")
    assert result.exit_code == 2
    assert "unknown GPU 'a1000'" in result.stderr
    assert "a100, a100-80gb, h100, h100-sxm" in result.stderr
    assert calls(env, "launch") == []


def test_no_offer_under_max_price(env: RunningFake, gpujob: Callable) -> None:
    result = gpujob("up", "a100", "--max-price", "0.50", "--yes", "--no-bootstrap")
    assert result.exit_code == 1
    assert "no offer for a100:1 under $0.50/h" in result.stderr
    assert calls(env, "launch") == []


def test_429_then_success_backs_off_a_bounded_number_of_times(
    env: RunningFake, gpujob: Callable
) -> None:
    env.control.fault(op="launch", status=429, count=2)
    result = gpujob("up", "a100", "--yes", "--no-bootstrap")
    assert result.exit_code == 0, result.stderr
    assert [c["status"] for c in calls(env, "launch")] == [429, 429, 200]
    assert len(live(env)) == 1


def test_429_for_ever_gives_up(env: RunningFake, gpujob: Callable) -> None:
    env.control.fault(op="launch", status=429, count=50)
    result = gpujob("up", "a100", "--yes", "--no-bootstrap")
    assert result.exit_code == 1
    assert "still failing after 6 tries" in result.stderr
    assert len(calls(env, "launch")) == 6
    assert live(env) == []


def test_capacity_error_moves_to_the_next_region(env: RunningFake, gpujob: Callable) -> None:
    env.control.capacity(["gpu_1x_a100"], ["us-east-1"], count=8, race=True)
    result = gpujob("up", "a100", "--yes", "--no-bootstrap")
    assert result.exit_code == 0, result.stderr
    regions = [(c["body"]["region_name"], c["status"]) for c in calls(env, "launch")]
    assert regions == [("us-east-1", 400), ("us-south-1", 200)]


def test_never_active_is_terminated_after_the_timeout(env: RunningFake, gpujob: Callable) -> None:
    env.control.knobs(boot_forever=True)
    result = gpujob("up", "a100", "--yes", "--no-bootstrap", "--timeout", "0.5")
    assert result.exit_code == 1
    assert re.search(r"still booting after \d+ s", result.stderr), result.stderr
    assert re.search(rf"terminated {NAMED.pattern}", result.stderr)
    assert live(env) == []


@pytest.mark.parametrize(("op", "body"), [("list_instance_types", {"data": []}),
                                          ("list_instances", {"instances": []})])  # fmt: skip
def test_wrong_shape_is_an_error_not_zero(
    env: RunningFake, gpujob: Callable, op: str, body: dict
) -> None:
    env.control.fault(op=op, status=200, body=body)
    result = gpujob("up", "a100", "--yes", "--no-bootstrap")
    assert result.exit_code == 1
    assert "unexpected answer to GET" in result.stderr


def launch_stranger(fake: RunningFake) -> str:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {LAMBDA_API_KEY}"
    session.post(f"{fake.url}/ssh-keys", json={"name": "other", "public_key": PUBLIC_KEY})
    reply = session.post(f"{fake.url}/instance-operations/launch", json={
        "region_name": "us-west-1", "instance_type_name": "gpu_1x_a10",
        "ssh_key_names": ["other"], "name": "gpujob-stranger"})  # fmt: skip
    return reply.json()["data"]["instance_ids"][0]


def test_reconcile_leaves_an_ownerless_tagged_instance_alone(
    env: RunningFake, gpujob: Callable
) -> None:
    from launcher.clouds.lambda_cloud import LambdaCloud
    from launcher.targets.cloud.reconcile import reconcile

    stranger = launch_stranger(env)
    found = reconcile(LambdaCloud())
    assert found.unknown == [] and found.ours == []
    assert [(i.name, i.id) for i in found.foreign] == [("gpujob-stranger", stranger)]
    result = gpujob("up", "a100", "--dry-run")
    assert result.exit_code == 0
    assert (f"not ours, left alone: gpujob-stranger (lambda {stranger}, from before owners)"
            in result.stderr)  # fmt: skip


def test_lost_launch_answer_is_reconciled_and_removed(env: RunningFake, gpujob: Callable) -> None:
    """Ctrl-C between launch and its answer: the instance exists, its id was never heard.
    The failed up cannot even list (503s), so the next `down --all` must find it by tag."""
    env.control.fault(action="drop", op="launch", handle_first=True)
    env.control.fault(op="list_instances", status=503, skip=1, count=6)
    result = gpujob("up", "a100", "--yes", "--no-bootstrap")
    assert result.exit_code == 1
    assert "no answer to POST /instance-operations/launch" in result.stderr
    assert len(live(env)) == 1  # the orphan a real Ctrl-C would leave
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert re.search(rf"adopted {NAMED.pattern}", down.stderr)
    assert re.search(rf"terminated {NAMED.pattern}", down.stdout)
    assert live(env) == []


def test_lost_launch_answer_is_adopted_by_the_next_up(env: RunningFake, gpujob: Callable) -> None:
    env.control.fault(action="drop", op="launch", handle_first=True)
    env.control.fault(op="list_instances", status=503, skip=1, count=6)
    assert gpujob("up", "a100", "--yes", "--no-bootstrap").exit_code == 1
    again = gpujob("up", "a100", "--yes", "--no-bootstrap")
    assert again.exit_code == 0, again.stderr
    assert re.search(rf"adopted {NAMED.pattern}", again.stderr)
    assert len(live(env)) == 2
    assert gpujob("down", "--all").exit_code == 0
    assert live(env) == []


def test_down_one_host_by_name(env: RunningFake, gpujob: Callable) -> None:
    result = gpujob("up", "a100", "--yes", "--no-bootstrap")
    name = result.stdout.splitlines()[-1].split("\t")[0]
    assert gpujob("down", name, "--dry-run").stdout.startswith(f"would terminate {name}")
    assert len(live(env)) == 1
    assert gpujob("down", name.removeprefix("gpujob-")).exit_code == 0
    assert live(env) == []


def _up_in_a_process(tmp_path: Path) -> subprocess.Popen[str]:
    """`gpujob up` as a user runs it (its own process, this test's environment), stopped
    while its instance boots: the fake keeps it `booting` for ever."""
    import os
    import sys

    gpujob = str(Path(sys.executable).with_name("gpujob"))
    return subprocess.Popen([gpujob, "up", "a100", "--yes", "--no-bootstrap"],
                            env=dict(os.environ), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _wait_for_launch(fake: RunningFake) -> None:
    for _ in range(300):
        if live(fake):
            return
        time.sleep(0.05)
    raise AssertionError("up never launched")


def test_ctrl_c_during_up_terminates_what_it_launched(
    env: RunningFake, gpujob: Callable, tmp_path: Path
) -> None:
    env.control.knobs(boot_forever=True)
    up = _up_in_a_process(tmp_path)
    _wait_for_launch(env)
    up.send_signal(signal.SIGINT)
    _, err = up.communicate(timeout=60)
    assert up.returncode == 130, err
    assert re.search(rf"terminated {NAMED.pattern}", err)
    assert live(env) == []


def test_up_killed_outright_is_reconciled_by_the_next_command(
    env: RunningFake, gpujob: Callable, tmp_path: Path
) -> None:
    env.control.knobs(boot_forever=True)
    up = _up_in_a_process(tmp_path)
    _wait_for_launch(env)
    up.kill()  # no chance to clean up: the db row and the tagged instance remain
    up.communicate(timeout=60)
    (orphan,) = live(env)
    shown = json.loads(gpujob("status", "--json").stdout)["hosts"]
    assert [h["name"] for h in shown] == [orphan["name"]]  # status still knows it
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert f"terminated {orphan['name']}" in down.stdout
    assert live(env) == []


def test_filesystem_narrows_offers_to_its_region_and_is_attached_at_launch(
    env: RunningFake, gpujob: Callable
) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {LAMBDA_API_KEY}"
    made = session.post(f"{env.url}/filesystems", json={"name": "ckpts", "region": "us-west-1"})
    assert made.status_code == 200, made.text
    result = gpujob("up", "a100", "--yes", "--no-bootstrap", "--filesystem", "ckpts")
    assert result.exit_code == 0, result.stderr
    (launch,) = [c for c in calls(env, "launch") if c["status"] == 200]
    assert launch["body"]["file_system_names"] == ["ckpts"]
    assert launch["body"]["region_name"] == "us-west-1"
    unknown = gpujob("up", "a100", "--no-bootstrap", "--filesystem", "nope")
    assert unknown.exit_code == 2
    assert "no filesystem named 'nope' (yours: ckpts)" in unknown.stderr
    assert "add --yes to create it" in unknown.stderr
    assert gpujob("down", "--all").exit_code == 0


def test_a_filesystem_is_created_with_yes_in_the_cheapest_offers_region(
    env: RunningFake, gpujob: Callable
) -> None:
    dry = gpujob("up", "a100", "--yes", "--dry-run", "--filesystem", "fresh")
    assert dry.exit_code == 0, dry.stderr
    assert "dry run: would create the Lambda filesystem fresh in " in dry.stderr
    assert calls(env, "create_filesystem") == []
    result = gpujob("up", "a100", "--yes", "--no-bootstrap", "--filesystem", "fresh")
    assert result.exit_code == 0, result.stderr
    (made,) = calls(env, "create_filesystem")
    (launch,) = [c for c in calls(env, "launch") if c["status"] == 200]
    assert launch["body"]["file_system_names"] == ["fresh"]
    assert launch["body"]["region_name"] == made["body"]["region"]
    assert (
        f"created the Lambda filesystem fresh in {made['body']['region']}, mounted at "
        "/lambda/nfs/fresh" in result.stderr
    )
    assert gpujob("down", "--all").exit_code == 0


def test_a_rental_the_budget_refuses_creates_no_filesystem(
    env: RunningFake, gpujob: Callable
) -> None:
    """The filesystem is made only once nothing else refuses the rental: a budget that no
    offer fits used to find the refusal after the POST, leaving a filesystem and no host."""
    result = gpujob("up", "a100", "--yes", "--filesystem", "fresh", "--autostop", "30m",
                    "--autostop-key-on-host", "--max-cost", "0.01")  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert "--max-cost $0.01: " in result.stderr
    assert calls(env, "create_filesystem") == []


def test_a_filesystem_name_lambda_would_refuse_is_refused_before_any_call(
    env: RunningFake, gpujob: Callable
) -> None:
    result = gpujob("up", "a100", "--yes", "--no-bootstrap", "--filesystem", "my_ckpts")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines() == [
        "gpujob: error: --filesystem my_ckpts: not a Lambda filesystem name. a letter first, "
        "then letters, digits and -; 60 at most"
    ]
    assert calls(env, "create_filesystem") == calls(env, "launch") == []


def test_a_lone_booting_host_is_read_every_second_several_every_two(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lambda allows about 1 request/s: one host booting is read each second (a quick boot
    seen within one, not two); several share the pace of 2 s each; tests' GPUJOB_POLL_S wins."""
    from launcher.clouds import lambda_cloud

    monkeypatch.delenv("GPUJOB_POLL_S", raising=False)
    monkeypatch.setattr(lambda_cloud, "_booting", [1])
    assert lambda_cloud._read_interval() == 1.0
    monkeypatch.setattr(lambda_cloud, "_booting", [3])
    assert lambda_cloud._read_interval() == 2.0
    monkeypatch.setenv("GPUJOB_POLL_S", "0.05")
    assert lambda_cloud._read_interval() == 0.05
