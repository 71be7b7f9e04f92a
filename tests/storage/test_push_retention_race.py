"""A checkpoint the training program deletes while the agent pushes it: the program's own
retention (the quickstart's keep_last, save_total_limit) races the agent's push. The lab saw
`checkpoint-20/` left in S3 with all its data and no marker: `rclone copy` had sent the
files, the folder was gone before `rclone check --one-way` (nothing left to compare) and the
marker copy (nothing left to send), and the push reported it synced.

The invariant checked after every push: each checkpoint prefix in the bucket holds its
marker over the files that marker lists; nothing half-sent stays. Real rclone against the
real moto server; the deletion lands between two of the push's rclone steps because an
Rclone calls back after a named step, so each interleaving happens exactly, every run.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from conftest import KEY_ID, REPO, SECRET

# The modules as the agent imports them on a host: siblings on sys.path, one module object
# each, so `ckpt_watch.ckpt_sync.SyncError` is the class the watcher catches.
sys.path.insert(0, str(REPO / "launcher" / "agent"))
ckpt_watch: Any = importlib.import_module("ckpt_watch")
ckpt_sync: Any = ckpt_watch.ckpt_sync
ckpt_store: Any = ckpt_watch.ckpt_store
MARKER: str = ckpt_store.MARKER
REAL_RCLONE: type = ckpt_sync.Rclone


class Interleaved(REAL_RCLONE):
    """Real rclone; `then` runs once, just `before` or `after` the first step whose
    description starts with `step`: the program's retention landing at exactly that point."""

    def __init__(
        self, env: dict[str, str], *, at: tuple[str, str], then: Callable[[], None]
    ) -> None:
        super().__init__(env, log=subprocess.DEVNULL)
        self.when, self.step = at
        self.then: Callable[[], None] | None = then
        self.steps: list[str] = []

    def _fire(self, when: str, what: str) -> None:
        if self.then is not None and self.when == when and what.startswith(self.step):
            then, self.then = self.then, None
            then()

    def run(self, *args: str, what: str, capture: bool = False, changes: bool = True) -> str:
        self._fire("before", what)
        try:
            return super().run(*args, what=what, capture=capture, changes=changes)
        finally:
            self.steps.append(what)
            self._fire("after", what)


@pytest.fixture
def s3(remote: dict[str, str]) -> Iterator[Any]:
    yield boto3.client(
        "s3",
        endpoint_url=remote["url"],
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )


def rclone_env(url: str) -> dict[str, str]:
    """The remote `gpujob_t` as the agent gets it: variables of rclone's own process."""
    return {
        "RCLONE_CONFIG_GPUJOB_T_TYPE": "s3",
        "RCLONE_CONFIG_GPUJOB_T_PROVIDER": "Other",
        "RCLONE_CONFIG_GPUJOB_T_ENDPOINT": url,
        "RCLONE_CONFIG_GPUJOB_T_ACCESS_KEY_ID": KEY_ID,
        "RCLONE_CONFIG_GPUJOB_T_SECRET_ACCESS_KEY": SECRET,
        "RCLONE_CONFIG_GPUJOB_T_FORCE_PATH_STYLE": "true",
    }


def save(root: Path, step: int) -> Path:
    """A save as the quickstart makes it (5 files, then the marker), small enough that rclone
    sends each file in one request."""
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    sizes = {
        "model.safetensors": 300_000,
        "optimizer.pt": 600_000,
        "config.json": 700,
        "generation_config.json": 120,
    }
    for name, size in sizes.items():
        (path / name).write_bytes(os.urandom(size))
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}) + "\n")
    ckpt_store.write_marker(path, step, "program")
    return path


def bucket(s3: Any, name: str, prefix: str) -> dict[str, dict[str, int]]:
    """checkpoint name -> {file: size} of every object under `prefix/`."""
    found: dict[str, dict[str, int]] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name, Prefix=f"{prefix}/"):
        for obj in page.get("Contents", []):
            ckpt, _, rel = obj["Key"][len(prefix) + 1 :].partition("/")
            found.setdefault(ckpt, {})[rel] = obj["Size"]
    return found


def assert_only_whole_checkpoints(s3: Any, name: str, prefix: str) -> dict[str, dict[str, int]]:
    """What a user checks: every checkpoint folder in the bucket has its marker, and the
    marker's files are all there with its sizes."""
    found = bucket(s3, name, prefix)
    for ckpt, files in found.items():
        assert MARKER in files, f"{ckpt} left in S3 without its marker: {sorted(files)}"
        body = s3.get_object(Bucket=name, Key=f"{prefix}/{ckpt}/{MARKER}")["Body"].read()
        promised = json.loads(body)["files"]
        assert {rel: files.get(rel) for rel in promised} == promised, ckpt
    return found


def prune(path: Path) -> Callable[[], None]:
    """The program's own retention: the whole folder, as shutil.rmtree does it."""
    return lambda: shutil.rmtree(path)


def prune_half(path: Path, keep: tuple[str, ...]) -> Callable[[], None]:
    """An rmtree caught part-way (rclone lists the folder meanwhile): files gone, marker not."""

    def cut() -> None:
        for item in path.iterdir():
            if item.name not in keep:
                item.unlink()

    return cut


@pytest.mark.parametrize(
    "at",
    [
        pytest.param(("before", "copy to"), id="pruned-once-the-push-read-its-marker"),
        pytest.param(("after", "copy to"), id="pruned-after-the-data-copy"),
        pytest.param(("after", "check of"), id="pruned-after-the-check"),
    ],
)
def test_a_checkpoint_pruned_during_its_push_leaves_nothing_half_sent(
    remote: dict[str, str], s3: Any, tmp_path: Path, at: tuple[str, str]
) -> None:
    root = tmp_path / "checkpoints"
    doomed, kept = save(root, 20), save(root, 40)
    dest = f"gpujob_t:{remote['bucket']}/runs/qs"
    rc = Interleaved(rclone_env(remote["url"]), at=at, then=prune(doomed))

    moved = {m.name: m for m in ckpt_sync.push(root, dest, rc, names=[doomed.name, kept.name])}

    assert rc.then is None, f"the push never reached {at}: {rc.steps}"
    assert not doomed.exists()
    found = assert_only_whole_checkpoints(s3, remote["bucket"], "runs/qs")
    assert sorted(found) == [kept.name]
    assert moved[doomed.name].dropped and not moved[doomed.name].verified
    assert moved[kept.name].verified and not moved[kept.name].dropped
    assert found[kept.name] == {**ckpt_store.files_of(kept), MARKER: (kept / MARKER).stat().st_size}


def test_a_folder_listed_half_deleted_gets_no_marker_in_s3(
    remote: dict[str, str], s3: Any, tmp_path: Path
) -> None:
    """rmtree goes file by file: rclone can list a folder that still has its marker and only
    some of its files. That copy checks clean against itself; the marker's own list says it
    is not whole, so its marker is not sent and what was sent goes."""
    root = tmp_path / "checkpoints"
    doomed, kept = save(root, 20), save(root, 40)
    dest = f"gpujob_t:{remote['bucket']}/runs/qs"
    half = prune_half(doomed, keep=(MARKER, "config.json", "trainer_state.json"))
    rc = Interleaved(rclone_env(remote["url"]), at=("before", "copy to"), then=half)

    moved = {m.name: m for m in ckpt_sync.push(root, dest, rc, names=[doomed.name, kept.name])}

    assert rc.then is None and (doomed / MARKER).exists()
    assert sorted(assert_only_whole_checkpoints(s3, remote["bucket"], "runs/qs")) == [kept.name]
    assert moved[doomed.name].dropped and moved[kept.name].verified


def watcher(root: Path, url: str, sync_to: str, said: list[str]) -> Any:
    config = ckpt_watch.WatchConfig(root=root, keep_last=2, sync_to=sync_to)
    return ckpt_watch.Watcher(
        config=config,
        log_fd=subprocess.DEVNULL,
        say=said.append,
        publish=lambda _: None,
        stop_job=lambda reason: pytest.fail(f"the job was stopped: {reason}"),
        env=rclone_env(url),
    )


def test_the_agent_pushing_while_the_program_prunes_keeps_only_whole_checkpoints(
    remote: dict[str, str], s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lab's run, one look of the agent: checkpoint-20 pushed while the program, saving
    checkpoint-60 with its own keep_last 2, deletes it. Not reported synced, not in S3, and
    the agent's retention then has nothing more to delete."""
    root = tmp_path / "checkpoints"
    first, second, third = save(root, 20), save(root, 40), save(root, 60)
    said: list[str] = []
    agent = watcher(root, remote["url"], f"gpujob_t:{remote['bucket']}/runs/qs", said)
    made: list[Interleaved] = []

    def rclone(env: dict[str, str], log: object = None) -> Interleaved:
        made.append(Interleaved(env, at=("after", "copy to"), then=prune(first)))
        return made[-1]

    monkeypatch.setattr(ckpt_sync, "Rclone", rclone)

    agent._sync(ckpt_store.complete(root), wait=True)
    agent.tick()

    assert made and made[0].then is None
    found = assert_only_whole_checkpoints(s3, remote["bucket"], "runs/qs")
    assert sorted(found) == [second.name, third.name]
    assert agent.synced == {second.name, third.name} and not agent.unsettled
    log = "\n".join(said)
    assert f"{first.name}: deleted on this host during the push" in log
    assert f"synced {second.name}, {third.name} to" in log
    assert "retention: deleted" not in log


def test_a_failed_push_of_a_checkpoint_pruned_before_the_retry_is_cleaned_at_the_next_look(
    remote: dict[str, str], s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A push that fails after the data went (here `rclone check` finds a file that changed
    under it) leaves every checkpoint without its marker, to be retried. If the program
    deletes one before the retry, no push will ever touch it again: the agent's next look
    removes its leftovers, then pushes the rest."""
    root = tmp_path / "checkpoints"
    first, second = save(root, 20), save(root, 40)
    original = (second / "config.json").read_bytes()
    said: list[str] = []
    agent = watcher(root, remote["url"], f"gpujob_t:{remote['bucket']}/runs/qs", said)

    def rewrite() -> None:
        (second / "config.json").write_bytes(bytes(b ^ 0xFF for b in original))

    def rclone(env: dict[str, str], log: object = None) -> Interleaved:
        return Interleaved(env, at=("after", "copy to"), then=rewrite)

    monkeypatch.setattr(ckpt_sync, "Rclone", rclone)
    agent._sync(ckpt_store.complete(root), wait=True)

    assert agent.sync_failures == 1 and not agent.synced
    left = bucket(s3, remote["bucket"], "runs/qs")
    assert first.name in left and MARKER not in left[first.name]  # the leftover to clean
    assert agent.unsettled == {first.name, second.name}

    (second / "config.json").write_bytes(original)
    shutil.rmtree(first)  # the program's own retention, between two looks
    monkeypatch.setattr(ckpt_sync, "Rclone", REAL_RCLONE)
    agent._sync(ckpt_store.complete(root), wait=True)

    found = assert_only_whole_checkpoints(s3, remote["bucket"], "runs/qs")
    assert sorted(found) == [second.name]
    assert agent.synced == {second.name} and not agent.unsettled
    assert f"{first.name}: removed its partial copy from" in "\n".join(said)
