"""boto3 where an SDK call is the right tool: is the remote there, may we write, what is in it.

A listing of a missing S3 prefix succeeds empty (S3 has no folders), so "is it there" is
asked with calls that can fail: HEAD the bucket, write and delete a probe object.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from launcher.agent.ckpt_store import MARKER, RUN_MANIFEST, step_of
from launcher.errors import GpujobError
from launcher.storage.rclone_config import on_aws
from launcher.storage.remotes import Remote, RemotePath, credentials


class RemoteUnreachable(GpujobError):
    """The remote named in the message cannot be used; training must not start."""


def client(remote: Remote) -> Any:
    import boto3
    from botocore.config import Config

    model = remote.model
    creds = credentials(remote)
    session = boto3.Session(profile_name=model.profile) if model.profile else boto3.Session()
    kwargs: dict[str, Any] = {}
    if creds:
        kwargs = {
            "aws_access_key_id": creds["access_key_id"],
            "aws_secret_access_key": creds["secret_access_key"],
        }
    if model.ca_bundle and (model.endpoint or "https").startswith("https"):
        kwargs["verify"] = model.ca_bundle
    config = Config(
        connect_timeout=5,
        read_timeout=20,
        retries={"max_attempts": 2},
        s3={"addressing_style": "auto" if on_aws(model) else "path"},
    )
    return session.client(
        "s3",
        endpoint_url=model.endpoint,
        region_name=model.region or "us-east-1",
        config=config,
        **kwargs,
    )


def _where(remote: Remote) -> str:
    return f"remote {remote.name} ({remote.model.endpoint or 'AWS'}, bucket {remote.model.bucket})"


def _explain(remote: Remote, err: Exception, doing: str) -> RemoteUnreachable:
    from botocore.exceptions import BotoCoreError, ClientError

    hint = f"check the remote in {remote.where}, then `gpujob storage check {remote.name}`"
    if isinstance(err, ClientError):
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = err.response.get("Error", {}).get("Code", "")
        if status == 404 or code in ("404", "NoSuchBucket"):
            why = f"bucket {remote.model.bucket} does not exist there"
        elif status == 403 or code in ("403", "AccessDenied"):
            why = f"access denied ({code}); the keys cannot {doing}"
        else:
            why = f"{code or status}: {err.response.get('Error', {}).get('Message', '')}"
        return RemoteUnreachable(f"{_where(remote)}: {doing}: {why}", hint)
    if isinstance(err, BotoCoreError):
        return RemoteUnreachable(f"{_where(remote)}: {doing}: unreachable: {err}", hint)
    raise err


@dataclass
class CheckReport:
    remote: str
    bucket: str
    prefix: str
    objects_under_prefix: int
    probe: str
    notes: list[str] = field(default_factory=list)


def check(path: RemotePath, *, require_prefix: bool = False) -> CheckReport:
    """List the bucket, write and delete a probe under the prefix; one error naming the remote."""
    from botocore.exceptions import BotoCoreError, ClientError

    remote, s3 = path.remote, client(path.remote)
    bucket, prefix = remote.model.bucket, path.key_prefix
    step = "list the bucket"
    try:
        s3.head_bucket(Bucket=bucket)
        listed = s3.list_objects_v2(
            Bucket=bucket, Prefix=f"{prefix}/" if prefix else "", MaxKeys=1000
        )
        count = listed.get("KeyCount", 0)
        if require_prefix and prefix and count == 0:
            raise RemoteUnreachable(
                f"{_where(remote)}: nothing under {prefix}/ (S3 lists a missing prefix as empty)",
                f"`gpujob storage tree {remote.name}: --depth 2` shows what is there",
            )
        step = "write a probe object"
        key = f"{prefix}/.gpujob-probe-{uuid.uuid4().hex[:8]}".lstrip("/")
        s3.put_object(Bucket=bucket, Key=key, Body=b"gpujob write probe\n")
        step = "delete the probe object"
        s3.delete_object(Bucket=bucket, Key=key)
    except (BotoCoreError, ClientError) as err:
        raise _explain(remote, err, step) from None
    return CheckReport(remote.name, bucket, prefix, count, f"wrote and deleted {key}")


def list_keys(path: RemotePath) -> list[tuple[str, int]]:
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, s3 = path.remote.model.bucket, client(path.remote)
    prefix = f"{path.key_prefix}/" if path.key_prefix else ""
    keys = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [(o["Key"][len(prefix) :], o["Size"]) for o in page.get("Contents", [])]
    except (BotoCoreError, ClientError) as err:
        raise _explain(path.remote, err, "list the bucket") from None
    return keys


def read_object(path: RemotePath, rel: str) -> bytes | None:
    """The object `rel` under the prefix, or None when there is none."""
    from botocore.exceptions import BotoCoreError, ClientError

    key = f"{path.key_prefix}/{rel}" if path.key_prefix else rel
    bucket = path.remote.model.bucket
    try:
        return client(path.remote).get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise _explain(path.remote, err, f"read {key}") from None
    except BotoCoreError as err:
        raise _explain(path.remote, err, f"read {key}") from None


def tree(path: RemotePath, depth: int) -> list[str]:
    """Folders to `depth` with object counts and sizes; checkpoint folders say whether their
    marker is there (complete) or not (not a checkpoint yet: never synced down or counted)."""
    keys = list_keys(path)
    sizes: dict[str, list[int]] = {}
    marked: set[str] = set()
    folders: set[str] = set()
    for key, size in keys:
        parts = key.split("/")
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
        if parts[-1] == MARKER:
            marked.add("/".join(parts[:-1]))
        for level in range(1, min(len(parts), depth + 1)):
            folder = "/".join(parts[:level])
            entry = sizes.setdefault(folder, [0, 0])
            entry[0] += 1
            entry[1] += size
        if len(parts) <= depth:
            sizes.setdefault(key, [1, size])
    top = f"{path.remote.name}:{path.remote.model.bucket}/{path.key_prefix}".rstrip("/")
    lines = [f"{top}/  ({len(keys)} objects, {_size(sum(s for _, s in keys))})"]
    runs = {k.rsplit("/", 1)[0] for k, _ in keys if k.endswith(f"/{RUN_MANIFEST}")}
    for name in sorted(sizes):
        count, size = sizes[name]
        indent = "  " * name.count("/")
        leaf = name.rsplit("/", 1)[-1]
        is_folder = name in folders
        note = ""
        if is_folder and step_of(leaf) is not None:
            note = "  complete" if name in marked else f"  INCOMPLETE (no {MARKER})"
        elif is_folder and leaf == "logs":
            note = "  job logs (shipped by the agents; `gpujob logs JOB` reads them)"
        elif is_folder and leaf == "captures":
            note = "  captured steps (gpujob_capture; `gpujob replay JOB` runs one again)"
        elif is_folder and name in runs:
            note = "  run (its checkpoints and logs; gpujob-run.json says whose)"
        shown = (
            f"{leaf}/  ({count} objects, {_size(size)})" if is_folder else f"{leaf}  " + _size(size)
        )
        lines.append(f"{indent}{shown}{note}")
    if any(step_of(f) is not None for f in folders if "/" not in f):
        lines.append("note: checkpoints directly under the prefix are the flat layout of an "
                     "earlier gpujob (no run of their own); read as they are")  # fmt: skip
    return lines


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
