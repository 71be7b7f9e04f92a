"""SkyPilot's `file_mounts` with local sources: read as SkyPilot reads them (envs substituted,
`~` expanded, relative to the current folder), shown line by line under `--dry-run`, shipped
to every host and put in place by a command the plan shows; a bucket gpujob cannot reach, or
a local source that is not here, is one line naming the field (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from planning import plan_of, spec_of, target

from launcher.plan.model import CopyFile, RunCommand, SyncDir
from launcher.spec.load import load_job_spec

GPUJOB = str(Path(sys.executable).with_name("gpujob"))
RUN = "run: |\n  cat /data/in/a.txt\n"
TWO_HOSTS = target(2, hosts=("gpu-a", "gpu-b"), addresses=("10.0.0.1", "10.0.0.2"),
                   job_root="/home/u/.gpujob/jobs")  # fmt: skip


def dry_run(task: Path, *more: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUJOB_STATE_DIR": str(task.parent / "state")}
    return subprocess.run([GPUJOB, "submit", str(task), "--dry-run", *more], capture_output=True,
                          text=True, timeout=60, cwd=task.parent, env=env)  # fmt: skip


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The task's folder, as the current folder, with a data folder and a file beside it."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("a\n")
    (tmp_path / "cfg.yaml").write_text("lr: 1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def task(folder: Path, mounts: str) -> Path:
    path = folder / "task.yaml"
    path.write_text("envs:\n  DATA: data\nfile_mounts:\n" + mounts + RUN)
    return path


def test_local_sources_are_read_as_skypilot_reads_them(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(here))
    mounts = "  /data/in: ./$DATA\n  ~/cfg.yaml: ~/cfg.yaml\n"
    mounts += "  ~/sky_workdir/conf/cfg.yaml: cfg.yaml\n  rel/a.txt: data/a.txt\n"
    path = task(here, mounts)
    assert load_job_spec(path).spec.file_mounts == {
        "/data/in": f"{here}/data/",  # a folder: its contents go there
        "~/cfg.yaml": f"{here}/cfg.yaml",
        "conf/cfg.yaml": f"{here}/cfg.yaml",  # SkyPilot's ~/sky_workdir is the job's workdir
        "rel/a.txt": f"{here}/data/a.txt",
    }


def test_the_dry_run_shows_each_mount_on_its_line_and_how_it_is_shipped(here: Path) -> None:
    """On this machine every destination lies inside the job's folder: `~/...` in the job's
    own home (plan/sandbox.py)."""
    result = dry_run(task(here, "  ~/data/in: ./$DATA\n  conf/cfg.yaml: cfg.yaml\n"))
    assert result.returncode == 0, result.stderr
    assert (
        f"task.yaml:4: file_mounts.~/data/in -> file_mounts.~/data/in: {here}/data "
        "(./$DATA read from the current folder; shipped to every node)"
    ) in result.stderr
    assert (f"task.yaml:5: file_mounts.conf/cfg.yaml -> file_mounts.conf/cfg.yaml: "
            f"{here}/cfg.yaml (cfg.yaml read from the current folder; shipped to every node, "
            "under the job's workdir (SkyPilot's ~/sky_workdir))") in result.stderr  # fmt: skip
    job_dir = next(line.split()[-1] for line in result.stdout.splitlines() if "job dir" in line)
    assert f"  sync  {here}/data/ -> {job_dir}/mounts/1/ (changed files only;" in result.stdout
    assert f"  copy  {here}/cfg.yaml -> {job_dir}/mounts/0 (mode 0644)" in result.stdout
    assert f"sh {job_dir}/mounts/1 {job_dir}/home/data/in\n" in result.stdout
    assert f"sh {job_dir}/mounts/0 {job_dir}/workdir/conf/cfg.yaml\n" in result.stdout


def test_an_absolute_destination_says_who_writes_it_on_a_host(here: Path) -> None:
    result = dry_run(task(here, "  /data/in: ./$DATA\n"), "--on", "u@192.0.2.7")
    assert result.returncode == 0, result.stderr
    assert (
        f"task.yaml:4: file_mounts./data/in -> file_mounts./data/in: {here}/data "
        "(./$DATA read from the current folder; shipped to every node, put there by the host's "
        "login user without sudo (SkyPilot uses sudo): that user must be able to create it, or "
        "use a path under ~/)"
    ) in result.stderr
    assert "/.gpujob/workdirs/data-" in result.stdout and " /data/in\n" in result.stdout


@pytest.mark.parametrize(
    ("mounts", "line", "said"),
    [
        ("  /data/in: cos://bucket/data\n", 4,
         "file_mounts./data/in: cos:// buckets are not reached by gpujob (s3, gs and r2 are)"),
        ("  /data/in:\n    name: my-bucket\n    source: ./data\n    mode: MOUNT\n", 4,
         "file_mounts./data/in: name: a `name` with a `source` asks SkyPilot to create the "
         "bucket and upload to it, which gpujob never does"),
        ("  /data/in: ./nowhere\n", 4,
         "file_mounts./data/in: {here}/nowhere does not exist on this machine; create it, or "
         "fix the path (a file or folder shipped to every node)"),
        ("  /data/in/: ./data\n", 4,
         "file_mounts./data/in/: give a path on the host that does not end in `/`"),
        ("  ~/sky_workdir: ./data\n", 4, "file_mounts.~/sky_workdir: SkyPilot's "
         "`file_mounts.~/sky_workdir`: gpujob cannot honour it (the workdir itself is shipped "
         "as `workdir`)"),
    ],
)  # fmt: skip
def test_what_cannot_be_shipped_is_one_line_naming_the_field(
    here: Path, mounts: str, line: int, said: str
) -> None:
    result = dry_run(task(here, mounts))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"gpujob: error: {here}/task.yaml:{line}: "), lines
    assert said.format(here=here) in lines[-1]
    assert "Traceback" not in result.stderr


def test_a_gpujob_spec_names_absolute_sources(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    spec = spec_of(file_mounts={"/data": str(tmp_path / "d"), "x.cfg": str(tmp_path / "d")})
    assert spec.file_mounts == {"/data": f"{tmp_path}/d/", "x.cfg": f"{tmp_path}/d/"}
    with pytest.raises(ValueError, match="as an absolute path"):
        spec_of(file_mounts={"/data": "d"})


def test_remote_hosts_keep_a_lasting_copy_and_put_it_in_place(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f.txt").write_text("x")
    spec = spec_of(nodes=2, file_mounts={"/data": str(tmp_path / "d"),
                                         "~/f.txt": str(tmp_path / "f.txt")})  # fmt: skip
    plan = plan_of(spec, TWO_HOSTS)
    for node in plan.nodes:  # one node per host: each host gets its own
        steps = node.steps
        sync = next(s for s in steps if isinstance(s, SyncDir) and s.source == f"{tmp_path}/d")
        assert sync.mirror and sync.path.startswith("/home/u/.gpujob/workdirs/d-")
        copy = next(s for s in steps if isinstance(s, CopyFile) and s.source.endswith("f.txt"))
        assert copy.path == f"{node.job_dir}/mounts/1"
        places = [
            s.argv[-2:] for s in steps if isinstance(s, RunCommand) and "file_mounts" in s.why
        ]
        assert places == [(sync.path, "/data"), (copy.path, "~/f.txt")]
        workdir_copy = next(
            i for i, s in enumerate(steps) if "copy the workdir" in getattr(s, "why", "")
        )
        first_place = next(i for i, s in enumerate(steps) if "file_mounts" in getattr(s, "why", ""))
        assert workdir_copy < first_place  # SkyPilot's order: a mount overwrites the workdir
        last_sync = max(i for i, s in enumerate(steps) if isinstance(s, SyncDir))
        first_run = min(i for i, s in enumerate(steps) if isinstance(s, RunCommand))
        assert last_sync < first_run  # a batch takes every listing before its first command


def test_a_container_gets_each_mount_outside_the_workdir_at_the_same_path(
    tmp_path: Path,
) -> None:
    (tmp_path / "d").mkdir()
    spec = spec_of(file_mounts={"/data": str(tmp_path / "d"), "~/d": str(tmp_path / "d"),
                                "in/d": str(tmp_path / "d")})  # fmt: skip
    where = replace(
        target(1, hosts=("gpu-a",), addresses=("10.0.0.1",), job_root="/home/u/.gpujob/jobs"),
        runtime="docker",
        image_ref="img:1",
    )
    node = plan_of(spec, where).nodes[0]
    argv = json.loads(next(s.content for s in node.steps
                           if getattr(s, "path", "").endswith("/job.json")))["argv"]  # fmt: skip
    volumes = [argv[i + 1] for i, word in enumerate(argv) if word == "--volume"]
    assert "/data:/data" in volumes and "/home/u/d:/home/u/d" in volumes
    assert not any(v.startswith("in/d") or "/workdir/in/d" in v for v in volumes)


def test_a_mounted_file_is_shipped_with_its_own_permissions(tmp_path: Path) -> None:
    key, tool = tmp_path / "key.json", tmp_path / "tool.sh"
    key.write_text("{}")
    key.chmod(0o600)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    spec = spec_of(nodes=2, file_mounts={"~/.creds/key.json": str(key), "bin/tool.sh": str(tool)})
    copies = {s.source: s.mode for s in plan_of(spec, TWO_HOSTS).nodes[0].steps
              if isinstance(s, CopyFile) and "/mounts/" in s.path}  # fmt: skip
    assert copies == {str(key): 0o600, str(tool): 0o755}
