"""Shared by the GPU benchmarks: run a job through gpujob or bare torchrun, timing its output.

Both ways run the same script with the same arguments and GPUJOB_* values: the bare command
is built from gpujob's own Plan values, so the only difference is gpujob itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEADY = re.compile(rb"^(?:\[node 0\] )?steady tokens/s ([0-9.]+)", re.M)
FIRST_STEP = re.compile(rb"^(\[node \d+\] )?step 1/")


@dataclass
class RunResult:
    how: str
    exit_code: int
    wall_s: float
    first_step_s: float | None
    steady_tokens_per_s: float | None
    output: bytes = field(repr=False, default=b"")
    job_dir: Path | None = None

    def node_status(self, node: int = 0) -> dict:
        """The agent's status.json of a node (peak memory, exit code) for gpujob runs."""
        assert self.job_dir is not None
        return json.loads((self.job_dir / f"node-{node}" / "status.json").read_text())


def timed_run(how: str, argv: list[str], env: dict[str, str], cwd: Path) -> RunResult:
    """Run to the end, noting when the first training step's line arrives."""
    began = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    first_step, chunks = None, []
    for line in proc.stdout:
        chunks.append(line)
        if first_step is None and FIRST_STEP.match(line):
            first_step = time.perf_counter() - began
    code = proc.wait()
    output = b"".join(chunks)
    steady = STEADY.search(output)
    return RunResult(
        how, code, time.perf_counter() - began, first_step,
        float(steady.group(1)) if steady else None, output,
    )  # fmt: skip


def through_gpujob(spec: str, sets: list[str], label: str) -> RunResult:
    state = tempfile.mkdtemp(prefix="gpujob-bench-")
    env = dict(os.environ, GPUJOB_STATE_DIR=state)
    argv = [sys.executable, "-m", "launcher", "submit", spec, "--job-id", label]
    for item in sets:
        argv += ["--set", item]
    result = timed_run("gpujob submit", argv, env, REPO)
    result.job_dir = Path(state) / "jobs" / label
    return result


def through_torchrun(spec: str, sets: list[str]) -> RunResult:
    """Bare torchrun with exactly the program, arguments and derived values gpujob uses."""
    sys.path.insert(0, str(REPO))
    from launcher.spec.load import load_job_spec

    loaded = load_job_spec(REPO / spec, sets)
    job = loaded.spec
    scratch = Path(tempfile.mkdtemp(prefix="torchrun-bench-"))
    values = {
        "GPUJOB_GLOBAL_BATCH": job.batch.global_batch,
        "GPUJOB_MICRO_BATCH": job.batch.micro_batch,
        "GPUJOB_GRAD_ACCUM_STEPS": job.grad_accum_steps,
        "GPUJOB_SAVE_EVERY": job.checkpoints.every_steps,
        "GPUJOB_KEEP_LAST": job.checkpoints.keep_last,
        "GPUJOB_CHECKPOINT_DIR": scratch / "checkpoints",
    }
    env = dict(os.environ, PYTHONUNBUFFERED="1", **job.nccl, **job.envs)
    env.update({key: str(value) for key, value in values.items() if value is not None})
    assert job.run.entrypoint is not None
    program = [job.run.entrypoint, *job.run.args]
    if job.nodes == 1:
        argv = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(job.nproc_per_node), *program,
        ]  # fmt: skip
        return timed_run("bare torchrun", argv, env, loaded.workdir)
    return timed_run("bare torchrun", nodes_on_one_machine(job.nodes, job.nproc_per_node,
                     job.resources.gpus_per_node, program), env, loaded.workdir)  # fmt: skip


def nodes_on_one_machine(nodes: int, nproc: int, gpus: int, program: list[str]) -> list[str]:
    """`nodes` torchruns on this machine, each on its own GPUs (as gpujob's local target
    gives them), meeting at a c10d rendezvous on loopback: what a user types by hand for a
    multi-node job tried on one box. Exits non-zero when any of them does."""
    starts = []
    for rank in range(nodes):
        devices = ",".join(str(gpu) for gpu in range(rank * gpus, (rank + 1) * gpus))
        argv = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
            "--node-rank", str(rank), "--nproc-per-node", str(nproc), "--rdzv-backend",
            "c10d", "--rdzv-endpoint", "127.0.0.1:29571", "--rdzv-id", "bench", *program,
        ]  # fmt: skip
        starts.append(f"CUDA_VISIBLE_DEVICES={devices} {shlex.join(argv)} & pids+=($!)")
    script = (
        "pids=()\n"
        + "\n".join(starts)
        + '\nfor p in "${pids[@]}"; do wait "$p" || s=1; done\nexit ${s:-0}\n'
    )
    return ["bash", "-c", script]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
