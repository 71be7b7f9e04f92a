"""A served port and a preemption hook on an interruptible Vast instance, through the real
CLI, the Vast fake and a lab host behind it: `submit --up --provider vast` asks Vast to
publish the job's port and prints its public URL (the instance's mapping), which answers
from here; the fake then outbids the instance, stopping its container as Vast stops it
(SIGTERM, then SIGKILL after the grace), and the job's preemption hook runs within that
grace: its output is in the job's log on the instance's kept disk, where `gpujob logs`
reads it once the user starts the instance again.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_recovery as recovery
from labtools import gpujob, page_or_empty, wait_until

from infra.fakes import RunningFake
from launcher.clouds.vast import Vast

pytestmark = pytest.mark.lab
# The recovery tests' fixtures: both fakes over lab hosts, the job image built, a user's shell.
backend, bucket, clouds, env = recovery.backend, recovery.bucket, recovery.clouds, recovery.env
Command = recovery.Command

TASK = """\
name: web
image: lab-cpu
workdir: {site}
resources: {{cpus: 1, disk_gb: 1, use_spot: true}}
ports: 8000
hooks:
  - run: echo "saving before the host goes ($GPUJOB_LIFECYCLE_EVENT)"
    events: [preemption]
run:
  shell: |
    echo job running
    exec python3 -m http.server 8000 --bind 0.0.0.0
"""


def test_a_vast_jobs_port_is_published_and_its_preemption_hook_runs_when_outbid(
    env: dict[str, str], clouds: dict[str, RunningFake], tmp_path: Path
) -> None:
    fake = clouds["vast"]
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("served from a vast instance\n")
    task = tmp_path / "task.yaml"
    task.write_text(TASK.format(site=site))
    submit = Command(env, "submit", str(task), "--up", "rtx4090", "--provider", "vast",
                     "--allow-cpu", "--detach", "--job-id", "web-vast")  # fmt: skip
    assert submit.finish() == 0, submit.text()
    said = bytes(submit.err).decode()
    found = re.search(r"http://(\S+):(\d+)/  <- port 8000 of job web-vast, published by its "
                      r"cloud", said)  # fmt: skip
    (inst,) = fake.api.books.instances.values()
    assert found, submit.text() + str(fake.api.books.instance_json(inst))
    mapped = inst.ports()["8000/tcp"][0]["HostPort"]  # what show-instance answers
    assert (found[1], found[2]) == (inst.host, mapped)
    page = f"http://{found[1]}:{found[2]}/"

    def served() -> bool:
        return page_or_empty(page) == b"served from a vast instance\n"

    wait_until(served, "the published port answering", 120)
    shown = gpujob(env, "status").stdout.decode().splitlines()
    assert f"{page}  <- port 8000 of job web-vast, published by its cloud" in shown, shown

    fake.control.instance(inst.id, spot_interrupted=True)  # outbid: Vast stops it
    wait_until(lambda: not served(), "the stopped instance's port going", 60)
    fake.control.instance(inst.id, clear=True)  # the outbid is over: the user starts it
    vast = Vast(api_key=env["VAST_API_KEY"], base_url=env["GPUJOB_VAST_API_URL"])
    vast.api.call("PUT", f"/instances/{inst.id}/", json={"state": "running"})
    wait_until(lambda: vast.describe(str(inst.id)).status == "running", "its restart", 120)

    log: list[str] = []

    def logged() -> bool:
        shown = gpujob(env, "logs", "web-vast")
        log[:] = shown.stdout.decode(errors="replace").splitlines()
        return "saving before the host goes (preemption)" in log

    try:
        wait_until(logged, "the preemption hook's output in `gpujob logs`", 60)
    finally:
        print("\n".join(log[-40:]))
    assert "job running" in log
    agent = [line for line in log if line.startswith("[gpujob-agent]")]
    assert ("[gpujob-agent] SIGTERM without a cancel of gpujob's: the host is going away "
            "(preemption); its hooks run, then the job is stopped") in agent, log  # fmt: skip
    assert "[gpujob-agent] lifecycle hook 1/1 (preemption): done" in agent, log
