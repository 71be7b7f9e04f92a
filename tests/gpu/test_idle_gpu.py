"""`resources.idle_gpu` on real GPUs, read from `nvidia-smi` by the agent: a job that holds
a GPU and sleeps is warned about, then stopped (`action: stop`), or warned about in `gpujob
status` until its GPU works again (`action: warn`). The local provider and the bare runtime
(the device machine has no Docker or sshd)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
HOLD = """\
import sys, time
from pathlib import Path
import torch

held = torch.ones(1 << 24, device="cuda")  # 64 MB on the GPU, then nothing runs on it
torch.cuda.synchronize()
sys.stdout.write("holding the GPU\\n"); sys.stdout.flush()
while not Path("go").exists():  # the test's signal to start working
    time.sleep(0.2)
sys.stdout.write("working\\n"); sys.stdout.flush()
a = torch.randn(4096, 4096, device="cuda")
while not Path("done").exists():
    for _ in range(50):
        a = torch.tanh(a @ a)
    torch.cuda.synchronize()
"""


def gpujob(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def job(tmp_path: Path, action: str) -> tuple[Path, dict[str, str]]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hold.py").write_text(HOLD)
    spec = tmp_path / "idle.yaml"
    spec.write_text(
        "name: idle\nimage: host\nworkdir: work\n"
        "resources:\n  accelerators: 'H100:1'\n"
        f"  idle_gpu: {{below_percent: 5, minutes: 0.25, action: {action}}}\n"
        "run:\n  entrypoint: hold.py\n  nproc_per_node: 1\n"
    )
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_CACHE_DIR=str(tmp_path / "cache"))  # fmt: skip
    return spec, env


def row_of(env: dict[str, str], job_id: str) -> dict:
    status = gpujob(env, "status", "--json")
    assert status.returncode == 0, status.stderr
    return next(r for r in json.loads(status.stdout)["jobs"] if r["id"] == job_id)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_job_holding_an_idle_gpu_is_warned_about_then_stopped(tmp_path: Path) -> None:
    spec, env = job(tmp_path, "stop")
    run = gpujob(env, "submit", str(spec), "--job-id", "idle-stop")
    out = run.stdout + run.stderr
    assert run.returncode not in (0, 124), out[-3000:]
    assert "holding the GPU" in out
    warned = out.find("[gpujob-agent] GPU idle warning: every GPU under 5% for ")
    reason = "stopped by gpujob: every GPU under 5% for 15s (resources.idle_gpu, action: stop)"
    stop = out.find(f"[gpujob-agent] {reason}; stopping the job (SIGTERM, grace 30 s)")
    assert 0 <= warned < stop, out[-3000:]
    assert f"gpujob: job idle-stop failed: {reason} (exit code" in run.stderr
    row = row_of(env, "idle-stop")
    assert (row["state"], row["warning"]) == ("failed", reason)


def test_an_idle_gpu_is_a_warning_in_status_until_it_works_again(tmp_path: Path) -> None:
    spec, env = job(tmp_path, "warn")
    started = gpujob(env, "submit", str(spec), "--job-id", "idle-warn", "--detach")
    assert started.returncode == 0, started.stderr[-3000:]
    workdir = tmp_path / "state" / "jobs" / "idle-warn" / "workdir"
    log = tmp_path / "state" / "jobs" / "idle-warn" / "node-0" / "job.log"
    try:
        wait_for(lambda: row_of(env, "idle-warn")["warning"].startswith(
            "GPUs idle (every GPU under 5%) since"), "the idle warning in status")  # fmt: skip
        assert row_of(env, "idle-warn")["state"] == "running"
        warning = next(line for line in log.read_text().splitlines()
                       if line.startswith("[gpujob-agent] GPU idle warning: "))  # fmt: skip
        assert warning.startswith("[gpujob-agent] GPU idle warning: every GPU under 5% for ")
        assert warning.endswith(" (resources.idle_gpu); the job goes on (action: warn)")
        (workdir / "go").touch()
        wait_for(lambda: "idle warning cleared" in log.read_text(), "the warning to clear")
        assert row_of(env, "idle-warn")["warning"] == ""
    finally:
        (workdir / "done").touch()
        gpujob(env, "cancel", "idle-warn", "--grace", "5")
    assert row_of(env, "idle-warn")["state"] == "cancelled"
