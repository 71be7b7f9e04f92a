"""A multi-node job on Lambda: a firewall ruleset opens only the job's ports, only to the job's
hosts, and goes with them (`down`, or a failed launch's undo); a replacement is rented in the
kept hosts' region, on the same ruleset. Against the Lambda fake on a thread, every exchange
checked against Lambda's OpenAPI 1.10 document (test_lambda_openapi.check).

Each launch is what `submit --up` makes for a 2-node job (CloudTarget builds the same
UpOptions), without the bootstrap: the fake's hosts answer only an SSH banner.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from clouds import BannerBackend, BannerServer, lambda_instances, point_at
from planning import spec_of
from test_lambda_openapi import check

from infra.fakes import LAMBDA_API_KEY, RunningFake, serve_lambda
from launcher.clouds.base import Instance, ProviderError
from launcher.remote.hosts import instance_entry
from launcher.targets.base import LaunchRequest
from launcher.targets.cloud.firewall import peers_for
from launcher.targets.cloud.hosts import UpOptions, launch_hosts
from launcher.targets.cloud.rent import renting
from launcher.targets.cloud.target import CloudTarget

JOB = "qs-20261127-040000-ab12"
AUTH = {"Authorization": f"Bearer {LAMBDA_API_KEY}"}


@pytest.fixture
def lam(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path) -> Iterator[RunningFake]:
    banner = BannerServer()
    fake = serve_lambda(BannerBackend(banner))
    point_at(monkeypatch, tmp_path, lam=fake, banner=banner)
    monkeypatch.setenv("GPUJOB_LAMBDA_LAUNCH_INTERVAL_S", "0")
    monkeypatch.setenv("GPUJOB_LAMBDA_RULESET_WAIT_S", "30")
    yield fake
    fake.stop()
    banner.close()


def rulesets(fake: RunningFake) -> list[dict[str, Any]]:
    reply = requests.get(f"{fake.url}/firewall-rulesets", headers=AUTH, timeout=10)
    reply.raise_for_status()
    return reply.json()["data"]


def two_node_spec() -> Any:
    return spec_of(nodes=2, ports=[8080], run={"entrypoint": "train.py", "launcher": "torchrun"})


def submit_up(count: int, peers: Any, region: str | None = None) -> list[Instance]:
    """`submit --up`'s launch: the rent kept (the job started) once the hosts run."""
    options = UpOptions(gpu="a100", provider="lambda", count=count, yes=True, bootstrap=False,
                        renting="submit --up", offers_on_stderr=True, region=region,
                        peers=peers)  # fmt: skip
    with renting("submit --up") as rent:
        made = launch_hosts(options, rent)
        rent.keep()
    return made


def openapi_problems(fake: RunningFake) -> list[str]:
    return [p for entry in fake.control.requests() for p in check(entry)]


def test_a_two_node_job_opens_only_its_ports_to_its_hosts_and_down_removes_the_ruleset(
    lam: RunningFake, gpujob: Callable
) -> None:
    hosts = submit_up(2, peers_for(two_node_spec(), JOB))
    (ruleset,) = rulesets(lam)
    assert ruleset["name"].endswith(f"-fw-{JOB}") and ruleset["region"]["name"] == "us-east-1"
    assert sorted(ruleset["instance_ids"]) == sorted(h.id for h in hosts)
    sources = {rule["source_network"] for rule in ruleset["rules"]}
    assert sources == {f"{h.ip}/32" for h in hosts}  # the job's hosts, nothing from anywhere
    spans = sorted(tuple(rule["port_range"]) for rule in ruleset["rules"])
    assert spans == [(8080, 8080), (29400, 29400), (32768, 60999)]  # ports:, rdzv, NCCL
    assert {rule["protocol"] for rule in ruleset["rules"]} == {"tcp"}
    launches = [r for r in lam.control.requests() if r["op"] == "launch"]
    assert [r["body"]["firewall_rulesets"] for r in launches] == [[{"id": ruleset["id"]}]] * 2
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert rulesets(lam) == []
    assert f"deleted the lambda firewall ruleset {ruleset['name']}" in down.stderr
    assert rulesets(lam) == []
    wrong = openapi_problems(lam)
    assert wrong == [], "\n".join(wrong)


def test_a_failed_launch_terminates_its_hosts_and_removes_the_ruleset_it_made(
    lam: RunningFake,
) -> None:
    lam.control.fault(op="launch", status=400, code="global/quota-exceeded", skip=1)
    with pytest.raises(ProviderError, match="quota-exceeded"):
        submit_up(2, peers_for(two_node_spec(), JOB))
    assert [i for i in lambda_instances(lam) if i["status"] in ("booting", "active")] == []
    assert rulesets(lam) == []
    assert [r["status"] for r in lam.control.requests() if r["op"] == "launch"] == [200, 400]
    assert any(r["op"] == "delete_firewall_ruleset" and r["status"] == 200
               for r in lam.control.requests())  # fmt: skip
    wrong = openapi_problems(lam)
    assert wrong == [], "\n".join(wrong)


def test_a_dry_run_says_what_it_would_open_and_makes_nothing(
    lam: RunningFake, capsys: pytest.CaptureFixture[str]
) -> None:
    options = UpOptions(gpu="a100", count=2, dry_run=True, renting="submit --up",
                        offers_on_stderr=True, peers=peers_for(two_node_spec(), JOB))  # fmt: skip
    assert launch_hosts(options, None) == []
    said = capsys.readouterr().err
    assert "would open TCP 29400, 32768-60999, 8080 between the job's hosts only" in said, said
    assert {r["op"] for r in lam.control.requests()} <= {"list_instance_types", "list_instances",
                                                         "list_ssh_keys"}  # fmt: skip
    assert rulesets(lam) == []


def test_no_ruleset_where_lambdas_firewall_blocks_nothing(lam: RunningFake) -> None:
    """us-south-1 (rules do not apply there), and a global ruleset that already lets every
    port in from anywhere: nothing to open, nothing made."""
    submit_up(2, peers_for(two_node_spec(), JOB), region="us-south-1")
    everything = {"protocol": "all", "port_range": [1, 65535], "source_network": "0.0.0.0/0",
                  "description": "open"}  # fmt: skip
    opened = requests.patch(f"{lam.url}/firewall-rulesets/global", headers=AUTH,
                            json={"rules": [everything]}, timeout=10)  # fmt: skip
    assert opened.ok, opened.text
    submit_up(2, peers_for(two_node_spec(), "other-20261127-040000-cd34"))
    assert rulesets(lam) == []
    assert all("firewall_rulesets" not in r["body"]
               for r in lam.control.requests() if r["op"] == "launch")  # fmt: skip


def test_a_replacement_is_rented_in_the_kept_hosts_region_on_the_jobs_ruleset(
    lam: RunningFake,
) -> None:
    spec = two_node_spec()
    node0, _ = submit_up(2, peers_for(spec, JOB), region="us-west-1")
    (ruleset,) = rulesets(lam)
    kept = (instance_entry(node0).to_record(), "")  # node 1 lost: rented again
    job = SimpleNamespace(loaded=SimpleNamespace(spec=spec), job_id=JOB, image=None)
    region, peers = CloudTarget("lambda")._beside_kept(job, kept, dry_run=False)  # type: ignore[arg-type]
    assert region == "us-west-1"  # us-east-1 is as cheap and listed first
    lam.control.call("DELETE", "/requests")
    (replacement,) = submit_up(1, peers, region=region)
    (launch,) = [r for r in lam.control.requests() if r["op"] == "launch"]
    assert launch["body"]["region_name"] == "us-west-1"
    assert launch["body"]["firewall_rulesets"] == [{"id": ruleset["id"]}]  # the job's own
    (after,) = rulesets(lam)
    assert {node0.id, replacement.id} <= set(after["instance_ids"])
    wrong = openapi_problems(lam)
    assert wrong == [], "\n".join(wrong)


def test_no_offer_in_the_kept_hosts_region_says_so_on_one_line(lam: RunningFake) -> None:
    """The recovery then rents every node again (supervise.recover_loop), as before."""
    spec = two_node_spec()
    node0, _ = submit_up(2, None, region="us-west-1")
    lam.control.capacity(instance_types=["gpu_1x_a100"], regions=["us-west-1"], count=0)
    job = SimpleNamespace(loaded=SimpleNamespace(spec=spec), job_id=JOB, image=None)
    request = LaunchRequest(spec_path="job.yaml", up="a100", provider="lambda", yes=True,
                            keep_hosts=(instance_entry(node0).to_record(), ""))  # fmt: skip
    with renting("submit --up") as rent, pytest.raises(ProviderError) as refused:
        CloudTarget("lambda", rent)._rented_hosts(request, job)  # type: ignore[arg-type]
    said = refused.value.one_line()
    assert "no offer for a100:1 in us-west-1" in said and "the kept hosts" in said, said
    assert "\n" not in said
    assert json.dumps(lam.control.requests()).count('"op": "launch"') == 2  # the first two


LAUNCH_IN_A_PROCESS = """
from launcher.targets.cloud.firewall import peers_for
from launcher.spec.job import JobSpec
from launcher.targets.cloud.hosts import UpOptions, launch_hosts
from launcher.targets.cloud.rent import renting
spec = JobSpec.model_validate({"name": "qs", "image": "host", "nodes": 2,
                               "run": {"entrypoint": "train.py"}})
options = UpOptions(gpu="a100", count=2, yes=True, bootstrap=False, renting="submit --up",
                    offers_on_stderr=True, peers=peers_for(spec, "qs-20261127-040000-ab12"))
with renting("submit --up") as rent:
    launch_hosts(options, rent)
"""


def test_ctrl_c_while_the_hosts_boot_removes_the_ruleset_with_them(lam: RunningFake) -> None:
    """`submit --up`'s launch in a process of its own, stopped by SIGINT while its hosts boot
    (the fake keeps them booting): its hosts terminated, then its ruleset deleted."""
    import os
    import signal
    import subprocess
    import sys
    import time

    lam.control.knobs(boot_forever=True)
    launching = subprocess.Popen([sys.executable, "-c", LAUNCH_IN_A_PROCESS],
                                 env=dict(os.environ), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)  # fmt: skip
    for _ in range(400):
        if len(lambda_instances(lam)) == 2:
            break
        time.sleep(0.05)
    assert len(rulesets(lam)) == 1
    launching.send_signal(signal.SIGINT)
    _, err = launching.communicate(timeout=60)
    assert launching.returncode != 0, err
    assert "deleted the lambda firewall ruleset gpujob-" in err, err
    assert rulesets(lam) == []
    assert [i for i in lambda_instances(lam) if i["status"] in ("booting", "active")] == []
