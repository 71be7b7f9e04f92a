"""`submit --ladder --up` through the real CLI against the fake Lambda over lab hosts: the
hosts of the top rung are rented once (one launch per host, never per rung), every rung runs
on them over SSH, each bounded to its steps, and the ladder terminates them when it ends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_up_hosts as up_hosts
from labtools import wait_until

pytestmark = pytest.mark.lab
backend, clouds, up_env, live = up_hosts.backend, up_hosts.clouds, up_hosts.env, up_hosts.live

PROGRAM = """\
import os, time
steps = int(os.environ.get("GPUJOB_MAX_STEPS", "100"))
node = os.environ["GPUJOB_NODE_RANK"]
for step in range(1, steps + 1):
    time.sleep(0.6)  # the agent samples the memory each second
    print(f"node {node} step {step}/{steps} samples/s {100 + step}", flush=True)
"""


def test_a_ladder_rents_once_for_its_top_rung_and_terminates_at_its_end(
    up_env: dict[str, str], clouds: dict, backend: object, tmp_path: Path
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "prog.py").write_text(PROGRAM)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: lad\nimage: host\nworkdir: work\n"
                    "run: {entrypoint: prog.py, launcher: none}\n")  # fmt: skip
    ladder = ("--ladder", "1,2", "--ladder-steps", "4", "--job-id", "lad")
    done = up_hosts.gpujob(up_env, "submit", str(spec), *ladder, "--up", "a100", "--allow-cpu",
                           "--runtime", "bare")  # fmt: skip
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, out[-2000:] + err[-3000:]
    launches = [r for r in clouds["lambda"].control.requests() if r["op"] == "launch"]
    assert len(launches) == 2, launches  # the top rung's two hosts, once
    table = out[out.index("world  exit") :].splitlines()
    assert [row.split()[:2] for row in table[1:]] == [["1", "0"], ["2", "0"]], table
    assert re.match(r"1\s+0\s+0:\d+\.\dM\s+-\s+\d+\.\ds\s+104 samples/s$", table[1]), table
    assert re.match(r"2\s+0\s+0:\d+\.\dM 1:\d+\.\dM\s+-\s+\d+\.\ds\s+104 samples/s$", table[2])
    assert "node 0 step 4/4" in out and "node 1 step 4/4" in out and "step 5/" not in out
    assert err.count("after the finished ladder --up") == 2, err
    assert live(clouds["lambda"], "lambda") == [], err
    wait_until(lambda: not backend.records, "the lab hosts of the terminated instances go")
