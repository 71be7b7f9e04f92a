"""Image definitions (`images/NAME.yaml`): the pins a job's environment is built from.

The same definition becomes a Docker image (docker runtime) or a virtual environment on the
host (bare runtime), so a job runs with the same wheels either way.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, field_validator

from launcher.errors import UsageError
from launcher.spec.job import StrictModel

PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")
HOST_IMAGE = "host"


class ImageDefinition(StrictModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    base: str = Field(description="Base image: a CUDA image tag, or the lab base in tests.")
    python: str = Field(default="3.11", pattern=r"^3\.[0-9]+$")
    torch: str = Field(description="Exact torch version, e.g. 2.13.0.")
    cuda: str = Field(default="cpu", pattern=r"^(cpu|cu[0-9]{3})$")
    requirements: list[str] = Field(default_factory=list, description="Exact `name==version`.")

    @field_validator("requirements")
    @classmethod
    def _exact_pins(cls, value: list[str]) -> list[str]:
        for item in value:
            if not PIN.match(item):
                raise ValueError(f"`{item}` is not an exact pin; write it as name==version")
        return value

    @property
    def pins(self) -> list[str]:
        return [f"torch=={self.torch}", *self.requirements]

    @property
    def fingerprint(self) -> str:
        """Stable short hash of everything that changes the environment."""
        payload = json.dumps(
            {"python": self.python, "cuda": self.cuda, "pins": self.pins}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


def find_images_dir(start: Path) -> Path | None:
    """The nearest `images/` folder at or above `start` (the spec's folder, usually)."""
    for folder in (start, *start.parents):
        if (folder / "images").is_dir():
            return folder / "images"
    return None


def load_image_definition(reference: str, spec_dir: Path) -> ImageDefinition | None:
    """The definition an `image:` names (a name under images/, or a path to its YAML), or None
    when it is a full image name or `host`."""
    if reference.endswith((".yaml", ".yml")):
        path: Path | None = spec_dir / reference
        images = path.parent if path else None
    elif reference == HOST_IMAGE or "/" in reference or ":" in reference:
        return None
    else:
        images = find_images_dir(spec_dir.resolve())
        path = images / f"{reference}.yaml" if images else None
    if path is None or not path.is_file():
        known = sorted(p.stem for p in images.glob("*.yaml")) if images else []
        raise UsageError(
            f"image `{reference}`: no definition {path or reference} found from {spec_dir}",
            f"known definitions: {', '.join(known)}" if known else "give a full image name",
        )
    try:
        data = yaml.safe_load(path.read_text())
        return ImageDefinition.model_validate(data)
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: YAML syntax error: {err}") from None
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(map(str, first["loc"]))
        raise UsageError(f"{path}: {field}: {first['msg']}") from None
