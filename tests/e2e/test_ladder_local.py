"""`submit --ladder` on this machine through the real CLI: the quickstart trains at world sizes
1 and 2 and, with a failure planted above world size 2 (rank 3 limits its address space and
allocates past it: a real allocation, refused by the kernel), the rung of 4 stops the ladder
with the cause read from its own output, each rung's memory in the table, and nothing of the
job left running."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
IMAGE = str(REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml")

PLANTED = """\
# The quickstart, with a failure planted above world size 2: rank 3 caps its address space a
# little above what it maps now and allocates 2 GiB, which the kernel refuses.
import os, resource, runpy, sys

if int(os.environ["WORLD_SIZE"]) > 2 and os.environ["RANK"] == "3":
    import torch

    mapped = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
                  if line.startswith("VmSize:"))
    limit = mapped + (256 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    print(f"rank 3: address space capped at {limit >> 20} MiB; allocating 2 GiB", flush=True)
    torch.ones(2 << 30, dtype=torch.uint8)
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


def write_ladder_job(folder: Path) -> Path:
    work = folder / "work"
    shutil.copytree(REPO / "jobs" / "quickstart", work)
    (work / "planted.py").write_text(PLANTED)
    spec = folder / "job.yaml"
    spec.write_text(
        f"name: ladder\nimage: {IMAGE}\nworkdir: work\nresources: {{cpus: 2, disk_gb: 1}}\n"
        "run:\n  entrypoint: planted.py\n  nproc_per_node: 2\n"
        '  args: ["--steps", "60", "--seq-len", "64", "--log-every", "5"]\n'
        "batch: {global_batch: 16, micro_batch: 4}\nenvs: {OMP_NUM_THREADS: 1}\n"
        "checkpoints: {dir: checkpoints, every_steps: 20, keep_last: 1}\n"
    )
    return spec


def test_the_ladder_passes_1_and_2_and_stops_at_4_with_the_cause_and_each_rungs_memory(
    tmp_path: Path,
) -> None:
    spec = write_ladder_job(tmp_path)
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    done = subprocess.run([GPUJOB, "submit", str(spec), "--ladder", "1,2,4", "--ladder-steps",
                           "12", "--job-id", "lad"], env=env, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    out, err = done.stdout, done.stderr
    assert done.returncode == 1, out[-3000:] + err[-3000:]

    table = out[out.index("world  exit") :].splitlines()
    rows = {line.split()[0]: line for line in table[1:4]}
    assert set(rows) == {"1", "2", "4"}, table
    mib = r"\d+\.\dM"
    assert re.match(rf"1\s+0\s+0:{mib}\s+-\s+\d+\.\ds\s+\d+ tokens/s$", rows["1"]), rows["1"]
    assert re.match(rf"2\s+0\s+0:{mib} 1:{mib}\s+-\s+\d+\.\ds\s+\d+ tokens/s$", rows["2"])
    assert re.match(rf"4\s+1\s+(\d:{mib} ?)+", rows["4"]), rows["4"]
    assert table[4] == "world 4: host memory refused (CPU allocator) on rank 3", table

    # each rung ran its bounded steps only (GPUJOB_MAX_STEPS), as its own job
    for world in (1, 2):
        log = (tmp_path / "state" / "jobs" / f"lad-r{world}" / "node-0" / "job.log").read_text()
        assert "over 12 steps" in log and f"rank 0/{world}: done" in log
    assert "world 4 failed: host memory refused (CPU allocator) on rank 3" in err
    assert "DefaultCPUAllocator" in err  # the rank's own last lines, from its real output
    assert re.search(r"the rung before \(world 2\) measured: host memory per rank 0:", err)
    assert not (tmp_path / "state" / "jobs" / "lad-r8").exists()

    left = [pid for pid in job_pids(tmp_path / "state" / "jobs")]
    assert left == [], f"processes of the ladder's jobs left running: {left}"


def job_pids(jobs: Path) -> list[int]:
    """Live processes whose environment names a node folder of these jobs (the agent's
    marker) or whose working directory is inside them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            environ = (entry / "environ").read_bytes()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if state != "Z" and (str(jobs).encode() in environ or cwd.startswith(str(jobs))):
            found.append(int(entry.name))
    return found


def test_a_ctrl_c_during_a_rung_cancels_it_and_ends_the_ladder(tmp_path: Path) -> None:
    spec = write_ladder_job(tmp_path)
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    log = tmp_path / "state" / "jobs" / "int-r1" / "node-0" / "job.log"
    ladder = subprocess.Popen([GPUJOB, "submit", str(spec), "--ladder", "1,2", "--ladder-steps",
                               "100000", "--job-id", "int"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (log.is_file() and "step 5/" in log.read_text()):
        assert ladder.poll() is None and time.monotonic() < deadline, ladder.communicate()
        time.sleep(0.5)
    ladder.send_signal(signal.SIGINT)
    out, err = ladder.communicate(timeout=120)
    assert ladder.returncode == 130, err
    assert "rung int-r1 still runs: cancelling it" in err and "job int-r1 cancelled" in err
    assert "world 1: the follow was stopped" in out
    shown = subprocess.run([GPUJOB, "status", "--json"], env=env, capture_output=True, text=True)
    states = {row["id"]: row["state"] for row in json.loads(shown.stdout)["jobs"]}
    assert states == {"int-r1": "cancelled"}, states  # the rung of 2 never started
    assert job_pids(tmp_path / "state" / "jobs") == []


def test_without_ladder_steps_a_rung_passes_at_its_first_complete_checkpoint(
    tmp_path: Path,
) -> None:
    spec = write_ladder_job(tmp_path)  # 100000 steps: only a checkpoint (every 5 steps) ends it
    spec.write_text(
        spec.read_text().replace('"60"', '"100000"').replace("every_steps: 20", "every_steps: 5")
    )
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    done = subprocess.run([GPUJOB, "submit", str(spec), "--ladder", "1", "--job-id", "ck"], env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, out[-3000:] + err[-3000:]
    # the agent's status is read every second: a save every 5 steps of a few ms is seen late
    said = re.search(r"rung ck-r1: complete checkpoint (checkpoint-\d+) on node 0: the rung "
                     r"passed; stopping it", err)  # fmt: skip
    assert said, err
    assert re.search(r"^1\s+0\s+0:\d+\.\dM\s+-\s+\d+\.\ds\s+\d+ tokens/s$", out, re.M), out
    assert "ladder ck: every rung passed" in err
    log = (tmp_path / "state" / "jobs" / "ck-r1" / "node-0" / "job.log").read_text()
    assert "step 1/100000" in log  # no GPUJOB_MAX_STEPS: the checkpoint ended it
    assert f"{said[1]}\n" in log and "step 100000/" not in log
    assert job_pids(tmp_path / "state" / "jobs") == []
