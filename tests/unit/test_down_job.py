"""`gpujob down JOB` takes the hosts rented for that job and nothing else: not a host the
job only ran on (`submit --on HOST` of a host `gpujob up` rented, which other jobs may use
too), and not a host another job still runs on. The Lambda and Vast fakes on a thread; the
jobs are records in the state db, as a submit leaves them."""

from __future__ import annotations

import time
from collections.abc import Callable

from test_ownership import cloud, live, up

from infra.fakes import RunningFake
from launcher.remote.hostkeys import instance_key
from launcher.remote.hosts import HostEntry
from launcher.state.db import JobRecord, StateDB

__all__ = ["cloud"]  # the fixture, parametrized over both fakes


def job_on(job_id: str, provider: str, host: str, inst_id: str, state: str) -> None:
    """A job recorded on the rented host: `provider` its target (the cloud's for `submit
    --up`, `ssh` for `submit --on HOST`)."""
    entry = HostEntry(name=host, address="127.0.0.1", user="root",
                      instance=instance_key(provider, inst_id))  # fmt: skip
    StateDB().add_job(JobRecord(job_id, job_id, "job.yaml", provider, "bare",
                                [entry.to_record()], [f"~/.gpujob/jobs/{job_id}/node-0"],
                                state, 3, time.time(), time.time(), "boom"))  # fmt: skip


def test_down_job_leaves_a_host_the_job_did_not_rent(
    cloud: tuple[str, RunningFake], gpujob: Callable
) -> None:
    provider, fake = cloud
    ((inst_id, name),) = up(gpujob, provider).items()
    job_on("onit-1", "ssh", name, inst_id, "failed")  # `submit --on NAME`
    refused = gpujob("down", "onit-1")
    assert refused.exit_code == 2, refused.stderr
    assert f"job onit-1 ran on {name}, which it did not rent" in refused.stderr
    assert f"gpujob down {name}" in refused.stderr
    assert live(provider, fake) == {inst_id: name}
    assert gpujob("down", name).exit_code == 0


def test_down_job_refuses_while_another_job_runs_on_its_host(
    cloud: tuple[str, RunningFake], gpujob: Callable
) -> None:
    provider, fake = cloud
    ((inst_id, name),) = up(gpujob, provider).items()
    job_on("kept-1", provider, name, inst_id, "failed")  # its own, kept for a look
    job_on("other-1", "ssh", name, inst_id, "running")  # `submit --on NAME` since
    refused = gpujob("down", "kept-1")
    assert refused.exit_code == 2, refused.stderr
    assert f"{name} also runs job other-1" in refused.stderr
    assert live(provider, fake) == {inst_id: name}
    job_on("other-2", "ssh", name, inst_id, "succeeded")  # an ended one is no reason
    StateDB().update_job("other-1", "cancelled")
    done = gpujob("down", "kept-1")
    assert done.exit_code == 0, done.stderr
    assert live(provider, fake) == {}
