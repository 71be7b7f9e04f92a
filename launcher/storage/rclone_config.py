"""rclone config rendered from the typed remote, never by shell echo (seed 000's backticks).

Default form: RCLONE_CONFIG_GPUJOB_<NAME>_* variables for the rclone child only; values pass
through untouched because nothing parses them. File form (`rclone.conf`, for hosts where a
variable cannot be set): rclone's parser (goconfig, runtime.md 1.2) trims lines, unwraps
backticks and triple quotes and cannot hold a newline, so values it would alter are refused
with the reason; the file is written to a temp file of mode 0600 and renamed over.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.errors import UsageError
from launcher.storage.remotes import Remote

PROVIDER = {
    "AWS": "AWS",
    "Other": "Other",
    "Minio": "Minio",
    "Cloudflare": "Cloudflare",
    "Lambda": "Other",
}
"""Lambda's filesystem S3 adapter is a generic S3 endpoint to rclone (runtime.md 1.10)."""


def rclone_name(remote: Remote) -> str:
    return f"gpujob_{remote.name.lower()}"


def rclone_path(remote: Remote, prefix: str) -> str:
    """`gpujob_lab:bucket/prefix`: the bucket always comes from the model, never retyped."""
    tail = prefix.strip("/")
    return f"{rclone_name(remote)}:{remote.model.bucket}" + (f"/{tail}" if tail else "")


AWS = "AWS"
"""rclone's S3 provider name for Amazon itself; every other S3 is addressed by path."""


def on_aws(model: Remote) -> bool:
    """Amazon's S3 (virtual-hosted buckets), not another S3 service (path-style)."""
    return bool(model.provider == AWS)


def options(remote: Remote, creds: dict[str, str], for_hosts: bool = False) -> dict[str, str]:
    """`for_hosts`: rclone runs on a job's host, which may reach S3 at another address."""
    model = remote.model
    opts = {"type": "s3", "provider": PROVIDER[model.provider]}
    if creds:
        opts.update(env_auth="false", **creds)
    else:
        opts["env_auth"] = "true"
    if model.region:
        opts["region"] = model.region
    endpoint = (model.host_endpoint or model.endpoint) if for_hosts else model.endpoint
    if endpoint:
        opts["endpoint"] = endpoint
    if not on_aws(model):
        opts["force_path_style"] = "true"
    opts["no_check_bucket"] = "true"
    return opts


def ca_bundle(
    remote: Remote, environ: dict[str, str] | None = None, for_hosts: bool = False
) -> str | None:
    """The CA bundle rclone should get as --ca-cert, or None for an http endpoint.

    rclone 1.60 fails every S3 call while AWS_CA_BUNDLE is set (`LoadCustomCABundleError`),
    so gpujob drops that variable for rclone and passes the same bundle rclone's way."""
    env = os.environ if environ is None else environ
    model = remote.model
    endpoint = ((model.host_endpoint if for_hosts else None) or model.endpoint) or "https://"
    if endpoint.startswith("http://"):
        return None
    if for_hosts:
        return model.ca_bundle  # this machine's AWS_CA_BUNDLE path means nothing on a host
    return model.ca_bundle or env.get("AWS_CA_BUNDLE") or None


def env_vars(remote: Remote, creds: dict[str, str], for_hosts: bool = False) -> dict[str, str]:
    """Variables for the rclone child process (never exported into a shell or a log)."""
    head = f"RCLONE_CONFIG_{rclone_name(remote).upper()}_"
    opts = options(remote, creds, for_hosts)
    env = {f"{head}{key.upper()}": value for key, value in opts.items()}
    bundle = ca_bundle(remote, for_hosts=for_hosts)
    if bundle:
        env["RCLONE_CA_CERT"] = bundle
    if remote.model.profile:
        env["AWS_PROFILE"] = remote.model.profile
    return env


def refuse_reason(value: str) -> str | None:
    """Why goconfig would not read `value` back as written, or None when it would."""
    if "\n" in value or "\r" in value:
        return "it holds a line break, and rclone.conf has no multi-line values"
    if value != value.strip():
        return "rclone.conf trims surrounding spaces, so they would be lost"
    if value.startswith("`") or value.startswith('"""'):
        return "rclone.conf unwraps a leading backtick or triple quote (or cannot parse it)"
    if "`" in value:
        return "a backtick in rclone.conf is kept or breaks the whole file (seed 000)"
    return None


def conf_text(remote: Remote, creds: dict[str, str]) -> str:
    lines = [f"[{rclone_name(remote)}]"]
    for key, value in options(remote, creds).items():
        reason = refuse_reason(value)
        if reason:
            what = "a key" if key in creds else f"`{key}`"
            raise UsageError(
                f"{remote.where}: remote {remote.name}: cannot write {what} to rclone.conf: "
                f"{reason}",
                "use the default env-var form (nothing parses the value there)",
            )
        lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def write_conf(path: Path, text: str) -> None:
    """Mode 0600 from the first byte, renamed over: never a readable or half-written file."""
    from launcher.remote.local import atomic_write

    atomic_write(path, text.encode(), 0o600)
