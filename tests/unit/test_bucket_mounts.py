"""Bucket file_mounts read and planned: each form SkyPilot writes (and gpujob's own spec)
becomes one bucket mount with its mode; every mistake of a file is one line naming file,
line and field, all at once; each source resolves to the typed remote checkpoints use, its
keys only on the start's stdin (masked in the dry run, never in job.json); a local job's
destinations lie inside its folder; the dry run says what happens to each."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from planning import spec_of, target
from pydantic import BaseModel

from launcher.agent import AGENT_SOURCE, INIT_LOCK_SOURCE
from launcher.plan.bucket_mounts import BucketSource
from launcher.plan.build import Sources, build_plan
from launcher.plan.model import WriteFile
from launcher.spec.bucket_mounts import BucketMount, MountSource


class Mounts(BaseModel):
    file_mounts: dict[str, MountSource]


@pytest.mark.parametrize(
    ("value", "source", "mode", "scheme", "bucket", "prefix"),
    [
        ("s3://data-bkt/imagenet/train", "s3://data-bkt/imagenet/train", "COPY", "s3",
         "data-bkt", "imagenet/train"),
        ("gs://gpt2-data-skypilot", "gs://gpt2-data-skypilot", "COPY", "gs",
         "gpt2-data-skypilot", ""),
        ("r2://ckpts/run1/", "r2://ckpts/run1/", "COPY", "r2", "ckpts", "run1/"),
        ("lab:datasets/x", "lab:datasets/x", "COPY", None, "", "datasets/x"),
        ({"source": "s3://out-bkt/ft", "mode": "MOUNT_CACHED"}, "s3://out-bkt/ft",
         "MOUNT_CACHED", "s3", "out-bkt", "ft"),
        ({"source": "s3://out-bkt"}, "s3://out-bkt", "MOUNT", "s3", "out-bkt", ""),
        ({"name": "my-ckpts", "mode": "MOUNT"}, "s3://my-ckpts", "MOUNT", "s3", "my-ckpts", ""),
        ({"name": "my-ckpts", "store": "gcs", "persistent": False}, "gs://my-ckpts", "MOUNT",
         "gs", "my-ckpts", ""),
    ],
)  # fmt: skip
def test_each_form_is_one_bucket_mount(
    value: object, source: str, mode: str, scheme: str | None, bucket: str, prefix: str
) -> None:
    mount = Mounts.model_validate({"file_mounts": {"/d": value}}).file_mounts["/d"]
    assert isinstance(mount, BucketMount)
    assert (mount.source, mount.mode, mount.scheme, mount.bucket, mount.prefix) == (
        source, mode, scheme, bucket, prefix,
    )  # fmt: skip
    assert mount.writable == (mode != "COPY")


def test_a_local_path_stays_a_local_mount() -> None:
    assert Mounts.model_validate({"file_mounts": {"/d": "/tmp"}}).file_mounts == {"/d": "/tmp"}


BAD_SPEC = """\
name: bad
image: host
workdir: null
file_mounts:
  a: cos://bkt/x
  b: {source: lab:x, mode: FAST}
  c:
    name: bkt
    source: ./local
  d: {source: s3://bkt, readonly: true}
  e:
    store: azure
    name: bkt
  f: s3://UPPER_case
run: {shell: 'true'}
"""


def test_every_mistake_of_a_file_at_once_one_line_each(
    tmp_path: Path, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.yaml").write_text(BAD_SPEC)
    done = gpujob("submit", "job.yaml", "--dry-run")
    assert done.exit_code == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("gpujob: error:")]
    assert [re.match(r"gpujob: error: job.yaml:(\d+): (\S+):", e).groups() for e in errors] == [
        ("5", "file_mounts.a"), ("6", "file_mounts.b"), ("7", "file_mounts.c"),
        ("10", "file_mounts.d"), ("11", "file_mounts.e"),
    ], done.stderr  # fmt: skip
    said = "\n".join(errors)
    assert "cos:// buckets are not reached by gpujob" in said
    assert "mode: Input should be 'COPY', 'MOUNT' or 'MOUNT_CACHED'" in said
    assert "name: a `name` with a `source` asks SkyPilot to create the bucket" in said
    assert "readonly: unknown key; a bucket mount has source, mode" in said
    assert "store: store `azure`: gpujob reaches s3, gcs and r2 buckets" in said


def write_spec(tmp_path: Path, mounts: str) -> None:
    (tmp_path / "job.yaml").write_text(
        f"name: b\nimage: host\nworkdir: null\nfile_mounts:\n{mounts}run: {{shell: 'true'}}\n"
    )


def test_resolution_problems_are_one_line_each_with_what_to_set(
    tmp_path: Path, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(tmp_path / "no-config"))
    for name in ("GS_ACCESS_KEY_ID", "R2_ACCOUNT_ID", "HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    write_spec(tmp_path, "  a: gs://bkt/x\n  b: nowhere:x\n  c: r2://bkt\n  d: s3://Bad_Name\n")
    done = gpujob("submit", "job.yaml", "--dry-run")
    assert done.exit_code == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("gpujob: error:")]
    assert len(errors) == 4, done.stderr
    assert errors[0].startswith("gpujob: error: job.yaml:5: file_mounts.a: gs://bkt/x: "
                                "GS_ACCESS_KEY_ID and GS_SECRET_ACCESS_KEY must be")  # fmt: skip
    assert errors[1].startswith("gpujob: error: job.yaml:6: file_mounts.b: no remote `nowhere`")
    assert errors[2].startswith("gpujob: error: job.yaml:7: file_mounts.c: r2://bkt: no "
                                "Cloudflare account id. export R2_ACCOUNT_ID")  # fmt: skip
    assert errors[3].startswith("gpujob: error: job.yaml:8: file_mounts.d: s3://Bad_Name: "
                                "bucket: a bucket name is 3 to 63")  # fmt: skip


def aws_keys(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In `folder`, with the user's AWS keys exported (a dry run contacts nothing)."""
    monkeypatch.chdir(folder)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-NotPrinted")


def test_dry_run_shows_each_mount_and_keeps_keys_off_job_json(
    tmp_path: Path, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws_keys(tmp_path, monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("R2_ACCOUNT_ID", "acct123")
    monkeypatch.setenv("R2_ACCESS_KEY_ID", "r2id")
    monkeypatch.setenv("R2_SECRET_ACCESS_KEY", "r2-secret-NotPrinted")
    write_spec(tmp_path, "  data: s3://in-bkt/ds\n  ~/out: {source: r2://out-bkt/o, "
               "mode: MOUNT_CACHED}\n  /abs: {source: s3://in-bkt/m, mode: MOUNT}\n")  # fmt: skip
    refused = gpujob("submit", "job.yaml", "--dry-run")
    # a job on this machine writes only inside its folder: /abs is for a host or a container
    assert refused.exit_code == 2 and "job.yaml:7: file_mounts./abs: a job on this machine " \
        "writes only inside its own folder" in refused.stderr  # fmt: skip
    write_spec(tmp_path, "  data: s3://in-bkt/ds\n  ~/out: {source: r2://out-bkt/o, "
               "mode: MOUNT_CACHED}\n  m: {source: s3://in-bkt/m, mode: MOUNT}\n")  # fmt: skip
    done = gpujob("submit", "job.yaml", "--dry-run", "--job-id", "bk")
    assert done.exit_code == 0, done.stderr
    out = done.stdout
    assert "NotPrinted" not in out + done.stderr
    assert ("file_mounts data: s3://in-bkt/ds (gpujob_mount0:in-bkt/ds), COPY: fetched with "
            "`rclone copy` before setup") in out  # fmt: skip
    assert (
        "file_mounts ~/out: r2://out-bkt/o (gpujob_mount2:out-bkt/o), MOUNT_CACHED: "
        "fetched with `rclone copy` before setup; what the job writes there is uploaded"
    ) in out
    assert "file_mounts m: s3://in-bkt/m (gpujob_mount1:in-bkt/m), MOUNT: " in out
    start = out[out.index("gpujob-agent.py start") :]
    assert "RCLONE_CONFIG_GPUJOB_MOUNT2_SECRET_ACCESS_KEY=***" in start  # on the start's stdin
    body = out[out.index("job.json (mode 0644)") :].split("\n  run ", 1)[0]
    care = json.loads("\n".join(line.split("| ", 1)[1] if "| " in line else ""
                                for line in body.splitlines()[1:]))["checkpoints"]  # fmt: skip
    job_dir = str(Path(care["job_dir"]))
    assert [(b["dst"], b["path"], b["mode"], b["source"]) for b in care["buckets"]] == [
        ("data", f"{job_dir}/workdir/data", "COPY", "gpujob_mount0:in-bkt/ds"),
        ("m", f"{job_dir}/workdir/m", "MOUNT", "gpujob_mount1:in-bkt/m"),
        ("~/out", f"{job_dir}/home/out", "MOUNT_CACHED", "gpujob_mount2:out-bkt/o"),
    ]  # fmt: skip


def test_on_remote_hosts_each_hosts_first_node_fetches_with_the_hosts_endpoint() -> None:
    spec = spec_of(nodes=2, file_mounts={"/output": {"source": "lab:o", "mode": "MOUNT_CACHED"}})
    bucket = BucketSource(dst="/output", source="lab:o", mode="MOUNT_CACHED",
                          rclone_path="gpujob_lab:b/o", env_here={"K": "http://127.0.0.1"},
                          env_hosts={"K": "http://10.0.0.1"})  # fmt: skip
    sources = Sources(workdir="/src/work", agent=str(AGENT_SOURCE),
                      init_lock=str(INIT_LOCK_SOURCE), buckets=(bucket,))  # fmt: skip
    hosts = target(2, hosts=("h1", "h2"), addresses=("10.0.0.2", "10.0.0.3"))
    plan = build_plan(spec, hosts, "job-1", {}, None, sources)
    for node in plan.nodes:
        config = json.loads(
            next(s for s in node.steps if isinstance(s, WriteFile) and s.path.endswith("job.json"))
            .content
        )  # fmt: skip
        start = node.steps[-1]
        assert config["checkpoints"]["buckets"] == [
            {"dst": "/output", "path": "/output", "mode": "MOUNT_CACHED",
             "source": "gpujob_lab:b/o", "written": "lab:o"},
        ]  # fmt: skip
        assert start.input is not None and json.loads(start.input.content)["storage"] == {
            "K": "http://10.0.0.1"
        }
    assert plan.buckets == (
        "file_mounts /output: lab:o (gpujob_lab:b/o), MOUNT_CACHED: fetched with `rclone copy` "
        "before setup; what the job writes there is uploaded (`rclone copy`, nothing deleted) "
        "on each checkpoint and when the job ends",
    )


def test_a_skypilot_bucket_it_would_delete_is_kept_and_said(
    tmp_path: Path, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws_keys(tmp_path, monkeypatch)
    (tmp_path / "task.yaml").write_text(
        "file_mounts:\n  ~/ckpt:\n    name: my-run-ckpts\n    mode: MOUNT_CACHED\n"
        "    persistent: false\nrun: echo hi\n"
    )
    done = gpujob("submit", "task.yaml", "--dry-run")
    assert done.exit_code == 0, done.stderr
    assert (
        "warning: task.yaml:2: file_mounts.~/ckpt.persistent: false: gpujob never deletes a "
        "bucket (SkyPilot deletes this one at `down`)"
    ) in done.stderr
    assert "file_mounts ~/ckpt: s3://my-run-ckpts (gpujob_mount0:my-run-ckpts), MOUNT_CACHED" in (
        done.stdout
    )
