"""Every script gpujob renders passes the real `shellcheck`, at its strictest default level."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from planning import REPO, env_setup, lab_cpu, plan_of, run_sh, spec_of, target

from launcher.spec.load import load_job_spec

SHELLCHECK = Path(sys.executable).with_name("shellcheck")
QUICKSTART = REPO / "jobs" / "quickstart.yaml"
TWO_HOSTS = target(2, hosts=("gpu-a", "gpu-b"), addresses=("10.0.0.1", "10.0.0.2"))


def shellcheck(script: str) -> None:
    result = subprocess.run(
        [str(SHELLCHECK), "--shell=bash", "--external-sources", "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def quickstart(*sets: str) -> list[str]:
    spec = load_job_spec(QUICKSTART, sets).spec
    plan = plan_of(spec, image=lab_cpu() if spec.image == "lab-cpu" else None)
    return [run_sh(plan)]


def every_option() -> list[str]:
    spec = spec_of(
        nodes=2,
        resources={"accelerators": "A100:4"},
        setup="pip install -e .\necho ready",
        secrets=["HF_TOKEN"],
        nccl={"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "^lo,docker"},
        envs={"MSG": "it's a quote"},
        run={
            "module": "pkg.train",
            "args": ["--ckpt", "${checkpoint_dir}", "--rank", "${node_rank}"],
            "serialize_init": True,
            "init_imports": ["torch", "transformers"],
            "memory_limit_gb": 1.5,
        },
    )
    plan = plan_of(spec, TWO_HOSTS, secrets={"HF_TOKEN": "hf_x"})
    return [run_sh(plan, 0), run_sh(plan, 1)]


def launcher_scripts(launcher: str | None, **run: str) -> list[str]:
    """Both nodes' run.sh for a two-host job under `launcher` (or a shell block), on GPUs
    (accelerate refuses several processes on CPU)."""
    spec = spec_of(nodes=2, unset_envs=["RAY_ADDRESS"], resources={"accelerators": "A100:2"},
                   run=run or {"module": "pkg.train", "launcher": launcher})  # fmt: skip
    plan = plan_of(spec, TWO_HOSTS)
    return [run_sh(plan, 0), run_sh(plan, 1)]


def merge_scripts(launcher: str) -> list[str]:
    """A job that trains, then merges: the program waited for, the merge after it."""
    spec = spec_of(nodes=2, run={"module": "pkg.train", "launcher": launcher},
                   merge={"adapter": "out/lora", "base": "b"})  # fmt: skip
    return [run_sh(plan_of(spec, TWO_HOSTS), 0)]


@pytest.mark.parametrize(
    "scripts",
    [
        pytest.param(quickstart, id="quickstart"),
        pytest.param(lambda: quickstart("profile=gpu"), id="quickstart-gpu-profile"),
        pytest.param(lambda: [run_sh(plan_of(spec_of(nodes=2), TWO_HOSTS), 1)], id="two-hosts"),
        pytest.param(every_option, id="serialize-init-memory-setup-secrets-nccl"),
        *[
            pytest.param(lambda launcher=launcher: launcher_scripts(launcher), id=launcher)
            for launcher in ("deepspeed", "accelerate", "ray", "none")
        ],
        pytest.param(lambda: launcher_scripts(None, shell="echo $SKYPILOT_NODE_RANK"), id="shell"),
        *[
            pytest.param(lambda launcher=launcher: merge_scripts(launcher), id=f"merge-{launcher}")
            for launcher in ("torchrun", "ray")
        ],
    ],
)
def test_run_scripts_pass_shellcheck(scripts: Callable[[], list[str]]) -> None:
    for script in scripts():
        shellcheck(script)


def test_run_script_with_dollar_values_passes_shellcheck() -> None:
    spec = spec_of(run={"entrypoint": "train.py", "args": ["$(not run)"]}, envs={"PRICE": "$5"})
    shellcheck(run_sh(plan_of(spec)))


def test_env_setup_script_passes_shellcheck() -> None:
    script = env_setup(plan_of(spec_of(), image=lab_cpu()))
    shellcheck("#!/usr/bin/env bash\n" + script + "\n")
