"""The recovery controller's keep of a failed job: a host the keep could not arm (its SSH
does not answer, so its watcher may be gone with it) is terminated as without the window,
while the armed one stays up for it. The Lambda fake on a thread; the arm itself is the
lab's (tests/lab/test_keep_on_failure_on_lab.py), so here it answers for one host only."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_dry_runs_change_nothing import cloud
from test_ownership import live, up

from infra.fakes import RunningFake
from launcher.remote.hostkeys import instance_key
from launcher.remote.hosts import HostEntry
from launcher.state.db import JobRecord

__all__ = ["cloud"]  # the Lambda fake's fixture


def entry(name: str, inst_id: str) -> str:
    """The job record's host, as the rent recorded it (the fake's SSH port: a banner that
    hangs up, so the node look-ups fail at once)."""
    from launcher.state.hosts import HostsDB

    row = HostsDB().host(name)
    assert row is not None and row.ip is not None
    return HostEntry(name=name, address=row.ip, port=row.ssh_port, user="root",
                     instance=instance_key("lambda", inst_id)).to_record()  # fmt: skip


def test_a_host_the_keep_could_not_arm_is_terminated_the_armed_one_stays(
    cloud: RunningFake,
    gpujob: Callable,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from launcher.supervise.recover_steps import keep_or_terminate

    made = up(gpujob, "lambda", count=2)
    (armed_id, armed), (lost_id, lost) = sorted(made.items(), key=lambda item: item[1])
    hosts = [entry(name, inst_id) for inst_id, name in ((armed_id, armed), (lost_id, lost))]
    job = JobRecord("kp-1", "kp", "job.yaml", "lambda", "bare", hosts,
                    ["~/.gpujob/jobs/kp-1/node-0", "~/.gpujob/jobs/kp-1/node-1"], "failed", 3,
                    time.time(), time.time(), "boom")  # fmt: skip
    (tmp_path / "work").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text("name: kp\nimage: host\nworkdir: work\nrun: {entrypoint: train.py}\n")
    monkeypatch.setattr("launcher.targets.cloud.keep.keep_failed",
                        lambda job, window_s, say, failed=None: [armed])  # fmt: skip
    request = {"spec_path": str(spec), "keep_on_failure": "30m"}
    capsys.readouterr()
    assert keep_or_terminate(job, "failed", request) is True
    assert live("lambda", cloud) == {armed_id: armed}
    said = [line for line in capsys.readouterr().err.splitlines() if "terminated" in line]
    assert said == [f"gpujob: terminated {lost} (lambda {lost_id}): job kp-1 failed, not "
                    "kept: it could not be armed for the window"]  # fmt: skip
    assert gpujob("down", "--all").exit_code == 0
