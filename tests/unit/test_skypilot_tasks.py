"""SkyPilot task YAML as it is: its fields read as gpujob's, shown line by line under
`--dry-run`; what gpujob cannot honour is one line naming the field (exit 2), a cosmetic
field a warning. Through the real CLI, nothing rented or started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.spec.load import load_job_spec

GPUJOB = str(Path(sys.executable).with_name("gpujob"))
RUN = "run: |\n  echo $SKYPILOT_NODE_RANK\n"


def task(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text(text)
    return path


def dry_run(path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUJOB_STATE_DIR": str(path.parent / "state")}
    return subprocess.run([GPUJOB, "submit", str(path), "--dry-run"], capture_output=True,
                          text=True, timeout=60, cwd=path.parent, env=env)  # fmt: skip


def test_skypilots_fields_become_gpujobs_with_its_conversions(tmp_path: Path) -> None:
    path = task(tmp_path, "name: minGPT-ddp\nresources:\n  cpus: 4+\n  accelerators: {L4: 2}\n"
                "  disk_size: 64GB\n  image_id: docker:reg.example/img:1\n  autostop: 10h\n"
                "num_nodes: 2\nenvs:\n  FLAG: true\n  MODEL: null\nsecrets:\n  HF_TOKEN: null\n"
                "setup: pip list\n" + RUN)  # fmt: skip
    os.environ["MODEL"] = "from-env"
    try:
        spec = load_job_spec(path).spec
    finally:
        del os.environ["MODEL"]
    assert (spec.name, spec.image, spec.nodes) == ("mingpt-ddp", "reg.example/img:1", 2)
    assert spec.resources.accelerators == "L4:2" and spec.resources.cpus == 4
    assert spec.resources.disk_gb == 64 and spec.resources.autostop.idle_minutes == 600
    assert spec.envs == {"FLAG": "True"}  # SkyPilot's str(): True
    # a null env taken from this environment is a secret: masked, never in a 0644 file
    assert spec.secrets == ["HF_TOKEN", "MODEL"] and spec.run.shell == "echo $SKYPILOT_NODE_RANK\n"


def test_the_dry_run_shows_the_translation_line_by_line(tmp_path: Path) -> None:
    path = task(tmp_path, f"num_nodes: 2\nresources:\n  cloud: lambda\n{RUN}")
    done = dry_run(path)
    assert done.returncode == 0, done.stderr
    assert f"{path}:1: num_nodes -> nodes: 2" in done.stderr
    assert f"{path}: (no resources.image_id) -> image: host" in done.stderr
    assert f"warning: {path}:3: resources.cloud: the cloud is chosen at" in done.stderr
    assert "SKYPILOT_NODE_RANK=1" in done.stdout.replace("export ", "")


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("service: {replicas: 2}\n", 1, "service"),
        ("resources:\n  use_spot: maybe\n", 2, "resources.use_spot"),
        ("resources:\n  image_id: ami-0123\n", 2, "resources.image_id"),
        ("secrets:\n  HF_TOKEN: hf_written_here\n", 2, "secrets.HF_TOKEN"),
        ("file_mounts:\n  /data: cos://bucket/data\n", 2, "file_mounts./data"),
        ("file_mounts:\n  /data: {source: s3://b/d, mode: FAST}\n", 2, "file_mounts./data"),
        ("workdir: [a, b]\n", 1, "workdir"),
        ("envs:\n  SKYPILOT_NODE_RANK: 3\n", 2, "envs.SKYPILOT_NODE_RANK"),
        ("envs:\n  NEEDED: null\n", 2, "envs.NEEDED"),
        ("envs:\n  MASTER_ADDR: 10.0.0.9\n", 2, "envs.MASTER_ADDR"),
        # SkyPilot's schema refuses keys it does not have; so does gpujob, naming them
        ("replicas: 2\n", 1, "replicas"),
        ("workdri: .\n", 1, "workdri"),
        ("resources:\n  acelerators: A100\n", 2, "resources.acelerators"),
        ("resources:\n  _requires_fuse: true\n", 2, "resources._requires_fuse"),
        ("resources:\n  gpus: A100\n  accelerators: A100\n", 2, "resources.gpus"),
        ("resources:\n  autostop: ''\n", 2, "resources.autostop"),
        ("resources:\n  autostop: soon\n", 2, "resources.autostop"),
        (
            "resources:\n  autostop:\n    idle_minutes: 5\n    wait_for: jobs\n",
            4,
            "resources.autostop.wait_for",
        ),
        ("resources:\n  autostop:\n    idle_minute: 5\n", 3, "resources.autostop.idle_minute"),
    ],
)
def test_what_gpujob_cannot_honour_is_one_line_naming_the_field(
    tmp_path: Path, text: str, line: int, field: str
) -> None:
    path = task(tmp_path, text + RUN)
    done = dry_run(path)
    assert done.returncode == 2, done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("gpujob: error:")]
    assert len(errors) == 1 and f"{path}:{line}: {field}:" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "state").exists()


def test_a_gpujob_spec_is_never_read_as_a_skypilot_task(tmp_path: Path) -> None:
    """It takes SkyPilot's `num_nodes` as its own `nodes` (spec/both_worlds.py)."""
    path = task(tmp_path, "name: t\nimage: host\nnum_nodes: 2\nrun:\n  shell: echo\n")
    done = dry_run(path)
    assert done.returncode == 0 and "2 node(s)" in done.stdout, done.stderr
    assert "a SkyPilot task" not in done.stderr


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("nodes: 2\n", 1, "nodes"),
        ("resources:\n  disk_gb: 20\n", 2, "resources.disk_gb"),
    ],
)
def test_gpujobs_own_keys_in_a_file_read_as_a_task_say_image_is_missing(
    tmp_path: Path, text: str, line: int, field: str
) -> None:
    path = task(tmp_path, text + RUN)
    done = dry_run(path)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"gpujob: error: {path}:{line}: {field}: this looks like a gpujob spec without "
        f"`image:` (`{field}` is gpujob's, not SkyPilot's), so it was read as a SkyPilot task; "
        "add `image:` (e.g. `image: host`)\n"
    )


def test_a_structured_run_in_a_file_read_as_a_task_says_image_is_missing(tmp_path: Path) -> None:
    path = task(tmp_path, "num_nodes: 2\nrun: {entrypoint: train.py}\n")
    done = dry_run(path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"gpujob: error: {path}:2: run: this looks like a gpujob spec")


def test_secrets_as_a_list_of_names_is_a_task_not_a_gpujob_spec(tmp_path: Path) -> None:
    path = task(tmp_path, "secrets: [GJ_TASK_TOKEN]\n" + RUN)
    done = subprocess.run([GPUJOB, "submit", str(path), "--dry-run"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "GJ_TASK_TOKEN": "x",
                               "GPUJOB_STATE_DIR": str(tmp_path / "state")})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "a SkyPilot task, read as gpujob's spec" in done.stderr


def test_a_tasks_workdir_is_read_from_the_current_folder_with_its_envs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `sky launch` reads it: against the folder the command runs in, not the task's,
    `$VAR`/`${VAR}` from the task's envs (an unknown name stays as written)."""
    (tmp_path / "tasks").mkdir()
    path = task(tmp_path / "tasks", "envs:\n  PROJ: proj\nworkdir: ${PROJ}/$SUB/code\n" + RUN)
    here = tmp_path / "here"
    (here / "proj" / "$SUB" / "code").mkdir(parents=True)
    with monkeypatch.context() as inside:
        inside.chdir(here)
        assert load_job_spec(path).workdir == here / "proj" / "$SUB" / "code"
    shown = dry_run(path)  # from the task's own folder: no such workdir there
    assert shown.returncode == 2
    assert f"{path}:3: workdir: {path.parent}/proj/$SUB/code is not a folder" in shown.stderr


def test_a_task_without_workdir_ships_nothing(tmp_path: Path) -> None:
    """SkyPilot ships nothing then: the folder the task sits in (a home, with its ~/.ssh)
    never leaves this machine; the job's workdir is an empty folder made on the host."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_text("key\n")
    path = task(tmp_path, RUN)
    assert load_job_spec(path).workdir is None
    done = dry_run(path)
    assert done.returncode == 0, done.stderr
    assert f"{path}: (no workdir) -> workdir: null (nothing is shipped" in done.stderr
    assert "  sync  " not in done.stdout and str(tmp_path / ".ssh") not in done.stdout
    job_dir = next(line.split()[-1] for line in done.stdout.splitlines() if "job dir" in line)
    assert f"mkdir -p {job_dir}/workdir\n" in done.stdout


def test_every_refusal_of_a_task_is_shown_at_once_sorted_by_line(tmp_path: Path) -> None:
    """Refusals and the spec's own validation errors together, one line each, by line: a
    task with many problems takes one try."""
    path = task(tmp_path, "service: {replicas: 2}\nnum_nodes: 0\nworkdri: .\nenvs:\n"
                "  SKYPILOT_NODE_RANK: 3\nsecrets:\n  HF_TOKEN: hf_here\nresources:\n"
                "  cloud: aws\n  use_spot: maybe\n  image_id: ami-1\nfile_mounts:\n"  # aws: warned
                "  /data: cos://b/d\n" + RUN)  # fmt: skip
    done = dry_run(path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    errors = done.stderr.splitlines()
    fields = [(1, "service"), (2, "nodes"), (3, "workdri"), (5, "envs.SKYPILOT_NODE_RANK"),
              (7, "secrets.HF_TOKEN"), (10, "resources.use_spot"),
              (11, "resources.image_id"), (13, "file_mounts./data")]  # fmt: skip
    assert [e.split(": ")[2:4] for e in errors] == [
        [f"{path}:{line}", field] for line, field in fields
    ], done.stderr
    assert not (tmp_path / "state").exists()
