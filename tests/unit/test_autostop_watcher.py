"""The autostop watcher's decisions, driven against the cloud fakes on loopback with the
watcher's own HTTP client (real urllib, real requests, the fake's request log as the
cloud's record): the window, an end called off by activity, a look that fails, what each
answer of the cloud means, and the end confirmed only by reading the instance back.

What keeps the host busy is handed to the watcher (`looks`): the real checks read this
machine's /proc, where an SSH session of whoever runs the tests would count.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from clouds import PUBLIC_KEY

from infra.fakes import LAMBDA_API_KEY, VAST_API_KEY, RunningFake
from launcher.agent.autostop import Watcher
from launcher.agent.autostop_call import CallFailed, dry_call, end_instance
from launcher.clouds.base import instance_name, launch_cheapest, parse_gpu_request

AGENT = "gpujob-autostop/1"
READS = {"lambda": "get_instance", "vast": "show_instance"}
ENDS = {"lambda": "terminate", "vast": "destroy_instance"}


@dataclass
class Host:
    """One instance on a fake and the watcher's folder for it."""

    provider: str
    fake: RunningFake
    instance_id: str
    folder: Path
    key: str  # what the host's key file holds

    def config(self, idle_s: float = 0, action: str = "terminate", **changes: Any) -> dict:
        config = {"idle_s": idle_s, "action": action, "provider": self.provider,
                  "instance_id": self.instance_id, "api_url": self.fake.url,
                  "key_file": str(self.folder / "key"), **changes}  # fmt: skip
        (self.folder / "config.json").write_text(json.dumps(config))
        return config

    def watcher(self, looks: Callable[[Path], str | None], **config: Any) -> Watcher:
        self.config(**config)
        watcher = Watcher(self.folder, looks=looks, first_backoff_s=0.01)
        watcher.load()
        return watcher

    def shown(self) -> dict[str, Any] | None:
        """The instance as the account sees it; None once the cloud no longer knows it."""
        if self.provider == "lambda":
            reply = requests.get(f"{self.fake.url}/instances/{self.instance_id}", timeout=10,
                                 headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"})  # fmt: skip
            return reply.json()["data"] if reply.ok else None
        reply = requests.get(f"{self.fake.url}/instances/{self.instance_id}/", timeout=10,
                             headers={"Authorization": f"Bearer {VAST_API_KEY}"})  # fmt: skip
        return reply.json()["instances"]

    def state(self) -> dict[str, Any]:
        return json.loads((self.folder / "state.json").read_text())

    def log(self) -> str:
        path = self.folder.parent / "autostop.log"
        return path.read_text() if path.exists() else ""

    def watcher_calls(self) -> list[dict[str, Any]]:
        return [r for r in self.fake.control.requests() if r["user_agent"] == AGENT]


def folder_for(tmp_path: Path, key: str) -> Path:
    folder = tmp_path / "home" / ".gpujob" / "autostop"
    folder.mkdir(parents=True)
    (folder / "key").write_text(key + "\n")
    (folder / "key").chmod(0o600)
    return folder


@pytest.fixture
def lambda_host(clouds: dict[str, RunningFake], tmp_path: Path) -> Host:
    from launcher.clouds.lambda_cloud import LambdaCloud

    cloud = LambdaCloud()
    inst = launch_cheapest(cloud, parse_gpu_request("a100"), instance_name("a100"), PUBLIC_KEY)
    cloud.wait_until_running(inst.id, 30)
    fake = clouds["lambda"]
    fake.control.call("DELETE", "/requests")  # the log starts with the watcher's calls
    return Host("lambda", fake, inst.id, folder_for(tmp_path, LAMBDA_API_KEY), LAMBDA_API_KEY)


@pytest.fixture
def vast_host(clouds: dict[str, RunningFake], tmp_path: Path) -> Host:
    """Created through the API as Vast's console would: its answer carries the instance's
    own key, which Vast gives the container (the host's key file holds it)."""
    from launcher.clouds.vast import Vast

    fake = clouds["vast"]
    offer = Vast().offers(parse_gpu_request("rtx4090"))[0]
    made = requests.put(f"{fake.url}/asks/{offer.raw_id}/", timeout=10, json={
        "client_id": "me", "image": "img", "disk": 20, "label": instance_name("rtx4090"),
        "runtype": "ssh_direc ssh_proxy", "env": {}, "cancel_unavail": True,
    }, headers={"Authorization": f"Bearer {VAST_API_KEY}"}).json()  # fmt: skip
    fake.control.call("DELETE", "/requests")
    key = made["instance_api_key"]
    return Host("vast", fake, str(made["new_contract"]), folder_for(tmp_path, key), key)


@pytest.fixture(params=["lambda", "vast"])
def host(request: pytest.FixtureRequest) -> Host:
    return request.getfixturevalue(f"{request.param}_host")


def idle(_: Path) -> None:
    return None


def answers(*said: str | Exception | None) -> Callable[[Path], str | None]:
    """Looks that answer in turn, the last for ever; an exception is raised (a look that
    fails)."""
    queue = list(said)

    def look(_: Path) -> str | None:
        now = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(now, Exception):
            raise now
        return now

    return look


# -- the window ------------------------------------------------------------------------------


def test_within_its_window_an_idle_host_is_left_alone(host: Host) -> None:
    watcher = host.watcher(idle, idle_s=3600)
    assert watcher.look() is False
    state = host.state()
    assert state["busy"] is None and state["deadline"] == state["idle_since"] + 3600
    assert host.watcher_calls() == []


@pytest.mark.parametrize(("provider", "action", "shows"), [
    ("lambda", "terminate", "the cloud shows the instance terminat"),  # -ing, or -ed by now
    ("vast", "terminate", "gone (no such instance)"),
    ("vast", "stop", "intended_status stopped"),
], ids=["lambda-terminate", "vast-destroy", "vast-stop"])  # fmt: skip
def test_past_its_window_the_host_ends_itself_and_reads_the_end_back(
    request: pytest.FixtureRequest, provider: str, action: str, shows: str
) -> None:
    host: Host = request.getfixturevalue(f"{provider}_host")
    watcher = host.watcher(idle, idle_s=0, action=action)
    assert watcher.look() is True
    assert watcher.end() is True
    made = host.watcher_calls()
    end_op = ENDS[provider] if action == "terminate" else "manage_instance"
    assert [r["op"] for r in made] == [end_op, READS[provider]], made
    caller = "account" if provider == "lambda" else f"instance {host.instance_id}"
    assert {r["caller"] for r in made} == {caller}  # Vast: the instance's own key only
    state = host.state()
    assert state["state"] == "ended" and shows in state["said"], state
    assert shows in host.log() and host.key not in host.log()
    found = host.shown()
    if provider == "lambda":
        assert found is None or found["status"] in ("terminating", "terminated")
    elif action == "stop":
        assert found is not None and found["intended_status"] == "stopped"
    else:
        assert found is None


# -- activity and failed looks ---------------------------------------------------------------


def test_a_login_during_the_retries_calls_the_end_off_and_starts_a_new_window(
    lambda_host: Host,
) -> None:
    """The cloud refuses the call; before the next try a login arrives: the end is called
    off, and the window runs again from that login, not from the old deadline."""
    host = lambda_host
    host.fake.control.fault("error", op="terminate", status=500, code="global/unknown", count=50)
    watcher = host.watcher(answers(None, "SSH session root@pts/0: -bash", None), idle_s=3600)
    assert watcher.end() is False
    assert host.state()["busy"] == "SSH session root@pts/0: -bash"
    assert host.state()["deadline"] is None
    assert "called off: SSH session root@pts/0: -bash" in host.log()
    assert (host.shown() or {}).get("status") == "active"
    called_off = time.time()
    assert watcher.look() is False  # idle again, but within the new window
    state = host.state()
    assert state["idle_since"] >= called_off and state["deadline"] == state["idle_since"] + 3600


def test_a_look_that_fails_counts_as_busy_and_moves_the_deadline(lambda_host: Host) -> None:
    host = lambda_host
    watcher = host.watcher(answers(None, OSError("cannot read /proc"), None), idle_s=3600)
    assert watcher.look() is False
    before = host.state()["idle_since"]
    assert watcher.look_safely() is False
    state = host.state()
    assert state["busy"].startswith("a look failed (OSError: cannot read /proc)")
    assert state["deadline"] is None
    assert watcher.look() is False
    assert host.state()["idle_since"] > before  # the window runs from the failed look
    assert host.watcher_calls() == []


def test_a_look_that_fails_at_once_ends_nothing_even_past_the_window(lambda_host: Host) -> None:
    host = lambda_host
    watcher = host.watcher(answers(RuntimeError("bug")), idle_s=0)
    assert [watcher.look_safely() for _ in range(3)] == [False, False, False]
    assert host.watcher_calls() == [] and (host.shown() or {}).get("status") == "active"


# -- what the cloud's answers mean -----------------------------------------------------------


def fault_lambda_404(host: Host) -> None:
    """A 404 that is not Lambda's word for a gone instance: a missing route at a proxy."""
    host.fake.control.fault("error", op="terminate", status=404, code="global/not-found")


def fault_lambda_2xx_without_end(host: Host) -> None:
    host.fake.control.fault("error", op="terminate", status=200,
                            body={"data": {"terminated_instances": []}})  # fmt: skip


def fault_vast_success_false(host: Host) -> None:
    host.fake.control.fault("error", op="destroy_instance", status=200,
                            body={"success": False, "error": "try_again"})  # fmt: skip


def fault_vast_404(host: Host) -> None:
    host.fake.control.fault("error", op="destroy_instance", status=404, code="not_found",
                            message="No route")  # fmt: skip


def wrong_key(host: Host) -> None:
    (host.folder / "key").write_text("not-the-key\n")


@pytest.mark.parametrize(("provider", "arrange", "said"), [
    ("lambda", fault_lambda_404, "answered 404"),
    ("lambda", fault_lambda_2xx_without_end, "still shows the instance active"),
    ("lambda", wrong_key, "answered 401"),
    ("vast", fault_vast_success_false, '"success": false'),
    ("vast", fault_vast_404, "answered 404"),
    ("vast", wrong_key, "answered 401"),
], ids=["lambda-404", "lambda-2xx-not-ended", "lambda-401", "vast-success-false",
        "vast-404", "vast-401"])  # fmt: skip
def test_an_answer_that_does_not_end_the_instance_is_not_taken_for_its_end(
    request: pytest.FixtureRequest, provider: str, arrange: Callable[[Host], None], said: str
) -> None:
    host: Host = request.getfixturevalue(f"{provider}_host")
    config = host.config()
    arrange(host)
    with pytest.raises(CallFailed) as failed:
        end_instance(config)
    assert said in str(failed.value), failed.value
    assert host.key not in str(failed.value)
    assert host.shown() is not None  # still there: the watcher tries again
    assert READS[provider] in [r["op"] for r in host.watcher_calls()]  # it was read back


def no_key_file(host: Host) -> None:
    (host.folder / "key").unlink()


@pytest.mark.parametrize(("provider", "arrange", "said"), [
    ("lambda", wrong_key, "answered 401"),
    ("vast", wrong_key, "answered 401"),
    ("vast", no_key_file, "and the instance has no CONTAINER_API_KEY"),
], ids=["lambda-401", "vast-401", "vast-no-key"])  # fmt: skip
def test_the_dry_call_refuses_a_host_that_could_never_end_itself(
    request: pytest.FixtureRequest, provider: str, arrange: Callable[[Host], None], said: str
) -> None:
    host: Host = request.getfixturevalue(f"{provider}_host")
    config = host.config()
    assert "answered 200" in dry_call(config)  # its key, taken: a read, nothing ended
    arrange(host)
    with pytest.raises(CallFailed) as failed:
        dry_call(config)
    assert said in str(failed.value), failed.value
    assert host.key not in str(failed.value)
    assert host.shown() is not None
    assert {r["op"] for r in host.watcher_calls()} <= set(READS.values())  # reads only


def test_a_call_repeated_while_the_instance_terminates_is_confirmed_by_the_read_back(
    lambda_host: Host,
) -> None:
    """Lambda answers a second terminate with an error; the instance is terminating all the
    same, and the read-back says so: the watch ends."""
    host = lambda_host
    config = host.config()
    ended = requests.post(f"{host.fake.url}/instance-operations/terminate", timeout=10,
                          json={"instance_ids": [host.instance_id]},
                          headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"})  # fmt: skip
    assert ended.ok, ended.text
    said = end_instance(config)
    assert "answered 500" in said and "the cloud shows the instance terminat" in said


def test_a_url_without_a_scheme_is_retried_and_logged_never_a_crash(lambda_host: Host) -> None:
    """urllib refuses it (a ValueError, or a URLError where the host part reads as a
    scheme): logged as a failed try, until activity calls the end off."""
    host = lambda_host
    for url, error in (("api.invalid/api/v1", "ValueError: unknown url type"),
                       (host.fake.url.removeprefix("http://"), "URLError")):  # fmt: skip
        watcher = host.watcher(answers(None, None, None, "SSH session root@notty: ls"),
                               idle_s=0, api_url=url)  # fmt: skip
        assert watcher.look() is True and watcher.end() is False
        log = host.log()
        assert log.count(f"not done: POST {url}/instance-operations/terminate: {error}") >= 2
        assert "called off: SSH session root@notty: ls" in log
    assert host.fake.control.requests() == []


def test_a_crash_of_the_watch_is_logged_and_the_watch_starts_again(lambda_host: Host) -> None:
    host = lambda_host
    (host.folder / "config.json").write_text("{}")  # a config the watch cannot work with
    watcher = Watcher(host.folder, looks=idle, first_backoff_s=0.01)
    running = threading.Thread(target=watcher.run, daemon=True)
    running.start()
    try:
        wait_for(lambda: "the watcher failed (KeyError: 'idle_s'" in host.log(), "a crash")
        assert host.state()["state"] == "failed"
        host.config(idle_s=3600)
        wait_for(lambda: "watching: after 3600 s" in host.log(), "the watch again")
    finally:
        watcher.stop = True
        running.join(timeout=30)
    assert not running.is_alive() and "stopped (SIGTERM)" in host.log()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not so after {timeout:.0f} s"
        time.sleep(0.01)
