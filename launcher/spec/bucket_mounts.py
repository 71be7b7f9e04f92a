"""Bucket `file_mounts`: a destination whose source is a bucket, not a local path
(skypilot-task.md §5.2): `s3://bucket/prefix`, `gs://...`, `r2://...`, `REMOTE:path` of the
spec's `storage:` or the user config, or SkyPilot's storage object `{source, mode}` (also
`{name, store}` for an existing bucket).

The spec only reads what was written; storage/bucket_mounts.py resolves each source to a
typed remote (spec/remote.py) at submit, and the agent fetches it onto the node before
`setup` (agent/bucket_mounts.py). Modes as SkyPilot's: `COPY` fetched once (a bucket given as
a plain string, as SkyPilot's); `MOUNT_CACHED` fetched, and what the job writes there uploaded
on each checkpoint and at the end; `MOUNT` an `rclone mount` where the host has FUSE, else as
`MOUNT_CACHED` (said in the log).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, model_validator

from launcher.spec.limits import StrictModel
from launcher.spec.remote import REMOTE_PATH
from launcher.spec.run import FieldError

SCHEMES = {"s3": "s3", "gs": "gs", "gcs": "gs", "r2": "r2"}
"""URL scheme (SkyPilot's `store:` names too) -> the scheme gpujob resolves."""
BUCKET_URL = re.compile(r"^(?P<scheme>[a-z0-9]+)://(?P<bucket>[^/\s]*)(?:/(?P<prefix>\S*))?$")
MODES = ("COPY", "MOUNT", "MOUNT_CACHED")
SOURCE_HINT = "s3://BUCKET/PREFIX, gs://..., r2://..., or REMOTE:path of `storage:`"


def is_bucket_source(text: str) -> bool:
    """A URL, or `REMOTE:path` (a local source is absolute or `~/...`, so never matches)."""
    return "://" in text or bool(REMOTE_PATH.match(text))


class BucketMount(StrictModel):
    """One bucket mounted at a destination of every node."""

    source: str = Field(description=f"The bucket: {SOURCE_HINT}.")
    mode: Literal["COPY", "MOUNT", "MOUNT_CACHED"] = Field(
        default="MOUNT",
        description="COPY: fetched before setup. MOUNT_CACHED: fetched, and what the job "
        "writes there uploaded on each checkpoint and at the end. MOUNT (SkyPilot's default): "
        "`rclone mount` where the host has FUSE, else as MOUNT_CACHED, with a warning.",
    )
    persistent: bool = Field(
        default=True, description="SkyPilot's; gpujob never creates or deletes a bucket."
    )

    @model_validator(mode="before")
    @classmethod
    def _name_store(cls, data: Any) -> Any:
        """SkyPilot's `{name, store}`: an existing bucket by name, same as its URL. A local
        `source` with a `name` asks SkyPilot to create the bucket and upload: gpujob does not."""
        if not isinstance(data, dict) or ("name" not in data and "store" not in data):
            return data
        data = dict(data)
        name, store = data.pop("name", None), data.pop("store", "s3")
        if store not in SCHEMES:
            raise FieldError(("store",), f"store `{store}`: gpujob reaches s3, gcs and r2 "
                             "buckets (any S3 remote as REMOTE:path); give `source:`")  # fmt: skip
        if "source" in data:
            raise FieldError(("name",), "a `name` with a `source` asks SkyPilot to create the "
                             "bucket and upload to it, which gpujob never does; upload it first "
                             "(`rclone copy`) and give only `source: s3://BUCKET`, or ship the "
                             "folder as a local file_mount")  # fmt: skip
        if not isinstance(name, str) or not name:
            raise FieldError(("name",), "give the bucket's name, or `source:` with its URL")
        data["source"] = f"{SCHEMES[store]}://{name}"
        return data

    @model_validator(mode="after")
    def _source(self) -> BucketMount:
        source_problem(self.source)
        return self

    @property
    def scheme(self) -> str | None:
        """`s3`, `gs` or `r2`; None for `REMOTE:path`."""
        match = BUCKET_URL.match(self.source)
        return SCHEMES[match.group("scheme")] if match else None

    @property
    def bucket(self) -> str:
        match = BUCKET_URL.match(self.source)
        return match.group("bucket") if match else ""

    @property
    def prefix(self) -> str:
        match = BUCKET_URL.match(self.source) or REMOTE_PATH.match(self.source)
        assert match is not None  # _source checked it
        return (
            match.group("prefix") if "prefix" in match.groupdict() else match.group("path")
        ) or ""

    @property
    def writable(self) -> bool:
        """What the job writes there reaches the bucket (COPY is a snapshot, as SkyPilot's)."""
        return self.mode != "COPY"


def source_problem(source: str) -> None:
    """Refuse a source gpujob cannot reach, naming the field."""
    match = BUCKET_URL.match(source)
    if match is None and "://" in source:
        raise FieldError(("source",), f"`{source}` is not a bucket URL; give {SOURCE_HINT}")
    if match is None:
        if not REMOTE_PATH.match(source):
            raise FieldError(("source",), f"`{source}` is no bucket; give {SOURCE_HINT}")
        return
    if match.group("scheme") not in ("s3", "gs", "r2"):
        raise FieldError(("source",), f"{match.group('scheme')}:// buckets are not reached by "
                         "gpujob (s3, gs and r2 are); describe the store as an S3 remote under "
                         "`storage:` and give REMOTE:path")  # fmt: skip
    if not match.group("bucket"):
        raise FieldError(("source",), f"`{source}` names no bucket")


def mount_value(value: Any) -> Any:
    """One `file_mounts` value (pydantic's error names its destination): a local path stays
    a string (spec/file_mounts.py checks it); a bucket URL, `REMOTE:path` or a storage
    object becomes a BucketMount; a mistake is one error that names the key inside."""
    if (isinstance(value, str) and not is_bucket_source(value)) or isinstance(value, BucketMount):
        return value
    if not isinstance(value, str | dict):
        raise ValueError(f"give a local path, a bucket ({SOURCE_HINT}) or "
                         "{source: ..., mode: COPY}")  # fmt: skip
    try:
        given = {"source": value, "mode": "COPY"} if isinstance(value, str) else value
        return BucketMount.model_validate(given)
    except ValidationError as err:
        first = err.errors()[0]
        cause = (first.get("ctx") or {}).get("error")
        loc = cause.loc if isinstance(cause, FieldError) else tuple(map(str, first["loc"]))
        message = str(cause) if isinstance(cause, FieldError) else first["msg"]
        if first["type"] == "extra_forbidden":
            message = "unknown key; a bucket mount has source, mode (and name, store, persistent)"
        if isinstance(value, str):  # the URL itself, written as a plain value
            raise ValueError(message.removeprefix("Value error, ")) from None
        raise ValueError(f"{'.'.join(loc)}: {message.removeprefix('Value error, ')}") from None


MountSource = Annotated[str | BucketMount, BeforeValidator(mount_value)]
"""A `file_mounts` value: a local path, or a bucket."""


def local_mounts(mounts: dict[str, str | BucketMount]) -> dict[str, str]:
    return {dst: src for dst, src in mounts.items() if isinstance(src, str)}


def bucket_mounts(mounts: dict[str, str | BucketMount]) -> dict[str, BucketMount]:
    return {dst: src for dst, src in mounts.items() if isinstance(src, BucketMount)}
