"""The plan of a job on this machine keeps it inside its folder (plan/sandbox.py): where each
file_mounts destination goes, the job's own HOME and venv, gpujob's venv off PATH."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from planning import exports, plan_of, run_sh, spec_of, target

from launcher.errors import UsageError
from launcher.plan.build import Sources, build_plan
from launcher.plan.model import NodeLayout, RunCommand
from launcher.plan.sandbox import placed_at, runs_in_docker

JOB = "/state/jobs/j"


def sandboxed(runtime: str = "bare", **fields: object) -> NodeLayout:
    return replace(target(1, job_root="/state/jobs"), provider="local", sandbox=True,
                   runtime=runtime, hidden_path=("/gj/venv/bin",),
                   shared_cache="/cache/job-cache", **fields)  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize(
    ("dst", "in_container", "placed"),
    [
        ("~/.ssh/id_rsa", False, f"{JOB}/home/.ssh/id_rsa"),
        ("conf/cfg.yaml", False, f"{JOB}/workdir/conf/cfg.yaml"),
        (f"{JOB}/extra", False, f"{JOB}/extra"),
        ("/etc/passwd", True, f"{JOB}/container-root/etc/passwd"),
        ("/data/in", True, f"{JOB}/container-root/data/in"),
    ],
)
def test_each_destination_lies_inside_the_job(dst: str, in_container: bool, placed: str) -> None:
    assert placed_at(dst, JOB, in_container, "t.yaml:3") == placed


@pytest.mark.parametrize("dst", ["/etc/passwd", "/tmp/x", "/state/jobs/other/x", "/state/jobs/j2"])
def test_an_absolute_destination_outside_the_job_is_refused_without_a_container(dst: str) -> None:
    with pytest.raises(UsageError) as refused:
        placed_at(dst, JOB, False, "t.yaml:3")
    line = refused.value.one_line()
    assert line.startswith(f"t.yaml:3: file_mounts.{dst}: a job on this machine writes only")
    assert "`--on HOST` or `--up GPU`" in line and "\n" not in line


def test_a_refusal_in_a_plan_names_the_line_the_submit_gave(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("x")
    spec = spec_of(file_mounts={"/etc/passwd": str(tmp_path / "x")})
    sources = Sources(workdir="/src", agent="/a.py", init_lock="/l.py",
                      mounts_where={"/etc/passwd": "task.yaml:2"})  # fmt: skip
    with pytest.raises(UsageError, match=r"^task.yaml:2: file_mounts./etc/passwd: "):
        build_plan(spec, sandboxed(), "j", {}, None, sources)


def test_a_container_here_mounts_the_home_the_cache_and_each_absolute_destination(
    tmp_path: Path,
) -> None:
    (tmp_path / "d").mkdir()
    spec = spec_of(file_mounts={"/data": str(tmp_path / "d"), "~/d": str(tmp_path / "d")})
    node = plan_of(spec, sandboxed("docker", image_ref="img:1"), job_id="j").nodes[0]
    argv = json.loads(next(s.content for s in node.steps
                           if getattr(s, "path", "").endswith("/job.json")))["argv"]  # fmt: skip
    volumes = [argv[i + 1] for i, word in enumerate(argv) if word == "--volume"]
    assert f"{JOB}/home:{JOB}/home" in volumes
    assert "/cache/job-cache:/cache/job-cache" in volumes
    assert f"{JOB}/container-root/data:/data" in volumes
    places = [
        s.argv[-1] for s in node.steps if isinstance(s, RunCommand) and "file_mounts" in s.why
    ]
    assert places == [f"{JOB}/container-root/data", f"{JOB}/home/d"]


def test_image_host_here_runs_in_a_venv_of_the_jobs_own() -> None:
    plan = plan_of(spec_of(setup="pip install x"), sandboxed(), job_id="j")
    steps = plan.nodes[0].steps
    venv = next(s for s in steps if isinstance(s, RunCommand) and "own venv" in s.why)
    assert "/usr/bin/python3 -m venv --without-pip --system-site-packages" in venv.argv[-1]
    env = exports(run_sh(plan))
    assert env["VIRTUAL_ENV"] == f"{JOB}/venv" and env["HOME"] == f"{JOB}/home"
    assert env["XDG_CACHE_HOME"] == "/cache/job-cache"
    assert f"export PATH={JOB}/venv/bin:" in run_sh(plan)
    home = next(s for s in steps if isinstance(s, RunCommand) and "own home" in s.why)
    assert steps.index(home) < steps.index(venv)


def test_a_remote_host_keeps_its_own_home_and_python() -> None:
    plan = plan_of(spec_of(setup="pip install x"), target(1), job_id="j")
    assert "HOME" not in exports(run_sh(plan))
    assert not any("own venv" in getattr(s, "why", "") for s in plan.nodes[0].steps)


def test_the_venv_gpujob_runs_from_leaves_the_jobs_path(tmp_path: Path) -> None:
    """The run script's PATH filter, run by bash: the hidden bin goes, order and the rest
    stay (a dir that only starts with the same name too)."""
    script = run_sh(plan_of(spec_of(), sandboxed(), job_id="j"))
    start = script.index("unset VIRTUAL_ENV")
    end = script.index("export PATH=$path\n", start) + len("export PATH=$path\n")
    block = script[start:end] + 'printf "%s %s" "$PATH" "${VIRTUAL_ENV:-unset}"'
    path = "/gj/venv/bin:/usr/bin:/gj/venv/bin2:/bin:/gj/venv/bin"
    shown = subprocess.run(["bash", "-c", block], env={"PATH": path, "VIRTUAL_ENV": "/gj/venv"},
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert shown.stdout == "/usr/bin:/gj/venv/bin2:/bin unset"


@pytest.mark.parametrize(
    ("definition", "ref", "runtime", "docker"),
    [
        (False, "python:3.11-slim", "auto", True),  # a container image: always Docker here
        (False, "python:3.11-slim", "docker", True),
        (False, None, "auto", False),  # image: host
        (True, None, "auto", False),  # a definition: its pinned venv
        (True, "reg/gpujob/job:lab-cpu", "auto", False),
        (True, "reg/gpujob/job:lab-cpu", "docker", True),
    ],
)
def test_where_a_local_image_runs(
    definition: bool, ref: str | None, runtime: str, docker: bool
) -> None:
    assert runs_in_docker(definition, ref, runtime, "t.yaml:2") is docker


@pytest.mark.parametrize(
    ("ref", "runtime", "said"),
    [
        ("python:3.11-slim", "bare", "t.yaml:2: image: python:3.11-slim is a container image; "
         "--runtime bare would run this machine's Python instead"),
        (None, "docker", "--runtime docker needs an image"),
    ],
)  # fmt: skip
def test_a_runtime_that_cannot_run_the_image_is_refused(
    ref: str | None, runtime: str, said: str
) -> None:
    with pytest.raises(UsageError) as refused:
        runs_in_docker(False, ref, runtime, "t.yaml:2")
    assert refused.value.one_line().startswith(said)
