"""Bucket file_mounts resolved at submit: each source to the typed remote checkpoints use
(spec/remote.py), its keys from the variables it names, and rclone's variables for it
(rclone_config.py), so the agent fetches it as checkpoint sync pushes: keys never on a
command line, in job.json or a log.

- `s3://BUCKET/PREFIX`: Amazon S3 with your AWS variables (AWS_ACCESS_KEY_ID and
  AWS_SECRET_ACCESS_KEY, else AWS_PROFILE, else the host's own role); AWS_ENDPOINT_URL_S3 or
  AWS_ENDPOINT_URL for another S3 service (path-style), AWS_REGION for the region.
- `gs://`: Cloud Storage through its S3-compatible endpoint, with an HMAC key in
  GS_ACCESS_KEY_ID and GS_SECRET_ACCESS_KEY (`gcloud storage hmac create`).
- `r2://`: Cloudflare R2, the account in R2_ACCOUNT_ID (or SkyPilot's ~/.cloudflare/accountid),
  the key in R2_ACCESS_KEY_ID and R2_SECRET_ACCESS_KEY.
- `REMOTE:path`: a remote of the spec's `storage:` or the user config, as checkpoints.sync_to.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.errors import ManyUsageErrors, UsageError
from launcher.plan.bucket_mounts import BucketSource
from launcher.spec.bucket_mounts import BucketMount, bucket_mounts
from launcher.storage import rclone_config
from launcher.storage.remotes import Remote, all_remotes, credentials, parse_remote_path

if TYPE_CHECKING:
    from launcher.spec.load import LoadedSpec
    from launcher.spec.remote import S3Remote

KEYS = {
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "gs": ("GS_ACCESS_KEY_ID", "GS_SECRET_ACCESS_KEY"),
    "r2": ("R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY"),
}


def resolve_buckets(loaded: LoadedSpec) -> tuple[BucketSource, ...]:
    """Every bucket mount of the spec, or every problem at once (one line each, at its line)."""
    mounts = bucket_mounts(loaded.spec.file_mounts)
    if not mounts:
        return ()
    remotes: dict[str, Remote] | None = None
    found, problems = [], []
    fuse = fuse_here()
    for index, (dst, mount) in enumerate(sorted(mounts.items())):
        where = loaded.where("file_mounts", dst)
        try:
            if mount.scheme is None and remotes is None:
                remotes = all_remotes(loaded.spec.storage, loaded.where("storage"))
            remote, prefix = _remote(mount, index, remotes or {}, f"{where}: file_mounts.{dst}")
            creds = credentials(remote)
            found.append(BucketSource(
                dst=dst, source=mount.source, mode=mount.mode,
                rclone_path=rclone_config.rclone_path(remote, prefix),
                env_here=rclone_config.env_vars(remote, creds),
                env_hosts=rclone_config.env_vars(remote, creds, for_hosts=True),
                fuse_here=fuse,
            ))  # fmt: skip
        except UsageError as err:
            problems.extend(err.lines())
    if problems:
        raise ManyUsageErrors(problems)
    return tuple(found)


def fuse_here() -> bool:
    """What the agent checks on a host (agent/bucket_mounts.py), for a local job's dry run."""
    return Path("/dev/fuse").exists() and bool(
        shutil.which("fusermount3") or shutil.which("fusermount")
    )


def _remote(
    mount: BucketMount, index: int, remotes: dict[str, Remote], where: str
) -> tuple[Remote, str]:
    if mount.scheme is None:
        path = parse_remote_path(mount.source, remotes, where)
        return path.remote, path.prefix
    model = _url_model(mount, where)
    return Remote(f"mount{index}", model, where), mount.prefix


def _url_model(mount: BucketMount, where: str) -> S3Remote:
    """The typed remote of an `s3://`, `gs://` or `r2://` URL, from the variables named in
    the module's docstring; a missing one is refused with what to set."""
    from pydantic import ValidationError

    from launcher.spec.remote import S3Remote

    scheme = mount.scheme
    assert scheme is not None
    access, secret = KEYS[scheme]
    keys = {"access_key_env": access, "secret_key_env": secret}
    if scheme == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        fields: dict[str, object] = {
            "provider": "Other" if endpoint else "AWS", "endpoint": endpoint,
            "region": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        }  # fmt: skip
        if access in os.environ and secret in os.environ:
            fields.update(keys)
        elif os.environ.get("AWS_PROFILE"):
            fields["profile"] = os.environ["AWS_PROFILE"]
    elif scheme == "gs":
        fields = {"provider": "Other", "endpoint": "https://storage.googleapis.com", **keys}
    else:
        account = os.environ.get("R2_ACCOUNT_ID") or _cloudflare_account()
        if not account:
            raise UsageError(f"{where}: {mount.source}: no Cloudflare account id",
                             "export R2_ACCOUNT_ID=... (or write it to ~/.cloudflare/accountid, "
                             "as SkyPilot reads it)")  # fmt: skip
        fields = {"provider": "Cloudflare", "region": "auto",
                  "endpoint": f"https://{account}.r2.cloudflarestorage.com", **keys}  # fmt: skip
    if fields.get("access_key_env") and not (access in os.environ and secret in os.environ):
        raise UsageError(f"{where}: {mount.source}: {access} and {secret} must be set in your "
                         "environment for a " f"{scheme}:// bucket",
                         "export them (the values go to the node on the agent's stdin, never "
                         "in a file you keep, a command line or a log), or describe the "
                         "bucket as a remote under `storage:` and write REMOTE:path")  # fmt: skip
    try:
        return S3Remote.model_validate({"bucket": mount.bucket, **fields})
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(map(str, first["loc"]))
        message = first["msg"].removeprefix("Value error, ")
        raise UsageError(f"{where}: {mount.source}: {field}: {message}") from None


def _cloudflare_account() -> str | None:
    path = Path.home() / ".cloudflare" / "accountid"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
