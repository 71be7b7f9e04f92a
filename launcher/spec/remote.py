"""An S3 remote as a spec or the user config names it: where checkpoints and logs go."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from launcher.spec.limits import StrictModel

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REMOTE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
"""rclone's env-var form (`RCLONE_CONFIG_<NAME>_*`) cannot express `-` or `.` in a name."""
REMOTE_PATH = re.compile(r"^(?P<remote>[A-Za-z][A-Za-z0-9_]{0,31}):(?P<path>[^\s]*)$")
UNSAFE_VALUE = re.compile(r"[\x00-\x1f\x7f`\"'$]|^\s|\s$")
"""Characters rclone.conf or a shell would interpret (seed 000's backticks); refused outright."""


class S3Remote(StrictModel):
    """An S3 bucket reached through rclone (transfers) and boto3 (checks). Credentials are
    named, never written: the variables hold them, or an AWS profile does."""

    provider: Literal["AWS", "Other", "Minio", "Cloudflare", "Lambda"] = "AWS"
    endpoint: str | None = None
    host_endpoint: str | None = Field(
        default=None,
        description="The endpoint as the job's hosts reach it, when that differs from this "
        "machine's (a private address; the lab's bridge).",
    )
    region: str | None = None
    bucket: str = Field(description="The bucket (Lambda: the filesystem's UUID).")
    access_key_env: str | None = None
    secret_key_env: str | None = None
    profile: str | None = None
    ca_bundle: str | None = Field(
        default=None, description="PEM CA bundle for an https endpoint; default AWS_CA_BUNDLE."
    )

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str) -> str:
        if not re.match(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", value):
            raise ValueError("a bucket name is 3 to 63 of a-z, 0-9, `.` and `-`, no prefix")
        return value

    @field_validator("endpoint", "host_endpoint", "region", "profile", "ca_bundle")
    @classmethod
    def _literal(cls, value: str | None) -> str | None:
        if value is not None and UNSAFE_VALUE.search(value):
            raise ValueError(
                "contains a quote, backtick, `$`, a control character or surrounding spaces;"
                " rclone.conf would keep them literally (seed 000), so write the bare value"
            )
        return value

    @field_validator("endpoint", "host_endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s#;]+(/[^\s#;]*)?$", value):
            raise ValueError("an endpoint is a URL like https://files.us-east-3.lambda.ai")
        return value

    @field_validator("access_key_env", "secret_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.match(value):
            raise ValueError("the NAME of a variable that holds the key, e.g. AWS_ACCESS_KEY_ID")
        return value

    @model_validator(mode="after")
    def _both_keys(self) -> S3Remote:
        if (self.access_key_env is None) != (self.secret_key_env is None):
            raise ValueError("give both `access_key_env` and `secret_key_env`, or neither")
        return self
