"""Job and image specs: pydantic models, and YAML loading whose errors name file, line and field.

Pure: reads the spec file it is given and nothing else; no network, no subprocess.
"""

from launcher.spec.job import JobSpec
from launcher.spec.load import LoadedSpec, load_job_spec

__all__ = ["JobSpec", "LoadedSpec", "load_job_spec"]
