"""Which lock a running job's image was built from, for `gpujob doctor` and the agent: the
image carries it as GPUJOB_IMAGE_LOCK (env) and as the `gpujob.image.lock` label."""

from __future__ import annotations

import os
from collections.abc import Mapping


def running_lock_hash(environ: Mapping[str, str] = os.environ) -> str | None:
    """Inside a container built by gpujob: its lock hash; None outside one (bare runtime)."""
    return environ.get("GPUJOB_IMAGE_LOCK") or None


def image_lock_hash(image: str) -> str | None:
    """From outside: the lock label of a local image (Docker SDK), None when absent."""
    from launcher.images.buildplan import LOCK_LABEL
    from launcher.images.docker_build import built_labels, docker_client

    return built_labels(docker_client(), image).get(LOCK_LABEL)
