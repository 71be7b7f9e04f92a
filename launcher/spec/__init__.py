"""Job and image specs: pydantic models, and YAML loading whose errors name file, line and field.

Pure: reads the spec file it is given and nothing else; no network, no subprocess.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.spec.job import JobSpec
    from launcher.spec.load import LoadedSpec, load_job_spec

__all__ = ["JobSpec", "LoadedSpec", "load_job_spec"]


def __getattr__(name: str) -> object:
    """The models are imported when first named, not with the package: `submit` reads its
    `--env` flags (spec/env_flags.py) and starts contacting the hosts while the models'
    import (pydantic, ~80 ms) runs (issue 32)."""
    if name == "JobSpec":
        from launcher.spec.job import JobSpec

        return JobSpec
    if name in ("LoadedSpec", "load_job_spec"):
        from launcher.spec import load

        return getattr(load, name)
    raise AttributeError(f"module 'launcher.spec' has no attribute {name!r}")
