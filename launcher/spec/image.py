"""Image definitions (`images/NAME.yaml`): the pins a job's environment is built from.

The same definition becomes a Docker image (docker runtime) or a virtual environment on the
host (bare runtime), so a job runs with the same wheels either way.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from pydantic import Field, ValidationError, field_validator

from launcher.errors import UsageError
from launcher.spec.job import StrictModel, each_matching
from launcher.spec.yaml_lines import dotted, read_yaml

PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")
HOST_IMAGE = "host"


class DeepSpeed(StrictModel):
    """DeepSpeed is sdist-only on PyPI: an image takes it only as a prebuilt wheel, so no op is
    compiled at install or JIT-compiled by 8 ranks at once at start (seed 001)."""

    version: str
    wheel: str | None = Field(default=None, description="URL or path of a prebuilt wheel.")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    ops: list[str] = Field(default_factory=list, description="Ops prebuilt into that wheel.")


class ImageDefinition(StrictModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    base: str = Field(description="Base image: a CUDA image tag, or the lab base in tests.")
    base_python: str | None = Field(
        default=None,
        pattern=r"^3\.[0-9]+$",
        description="The base image's Python, when the catalog does not know the base.",
    )
    python: str = Field(default="3.11", pattern=r"^3\.[0-9]+$")
    torch: str = Field(description="Exact torch version, e.g. 2.13.0.")
    cuda: str = Field(default="cpu", pattern=r"^(cpu|cu[0-9]{3})$")
    torchvision: str | None = None
    torchaudio: str | None = None
    flash_attn: str | None = Field(default=None, description="Exact flash-attn 2.x version.")
    deepspeed: DeepSpeed | None = None
    indexes: list[str] = Field(
        default_factory=list, description="Extra PEP 503 indexes to read wheels from."
    )
    requirements: list[str] = Field(default_factory=list, description="Exact `name==version`.")

    @field_validator("requirements")
    @classmethod
    def _exact_pins(cls, value: list[str]) -> list[str]:
        return each_matching(value, PIN, "is not an exact pin; write it as name==version")

    @property
    def pins(self) -> list[str]:
        named = {
            "torchvision": self.torchvision,
            "torchaudio": self.torchaudio,
            "flash-attn": self.flash_attn,
            "deepspeed": self.deepspeed.version if self.deepspeed else None,
        }
        extra = [f"{name}=={version}" for name, version in named.items() if version]
        return [f"torch=={self.torch}", *extra, *self.requirements]

    @property
    def fingerprint(self) -> str:
        """Stable short hash of everything that changes the environment (base included only
        when set beyond the defaults, so existing environments keep their names)."""
        data: dict[str, object] = {"python": self.python, "cuda": self.cuda, "pins": self.pins}
        if self.deepspeed and self.deepspeed.ops:
            data["deepspeed_ops"] = sorted(self.deepspeed.ops)
        payload = json.dumps(data, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


def load_image_definition(reference: str, spec_dir: Path) -> ImageDefinition | None:
    """The definition an `image:` names (a name under images/, or a path to its YAML), or None
    when it is a full image name or `host`."""
    if reference.endswith((".yaml", ".yml")):
        path: Path | None = spec_dir / reference
        images = path.parent if path else None
    elif reference == HOST_IMAGE or "/" in reference or ":" in reference:
        return None
    else:
        from launcher.resources import images_dir_for

        images = images_dir_for(reference, spec_dir)
        path = images / f"{reference}.yaml"
    if path is None or not path.is_file():
        from launcher.resources import builtin_images_dir, user_images_dir

        own = user_images_dir(spec_dir.resolve())
        folders = [f for f in (images, own, builtin_images_dir()) if f is not None]
        known = sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})
        raise UsageError(
            f"image `{reference}`: no definition {path or reference} found from {spec_dir}",
            f"known definitions: {', '.join(known)}" if known else "give a full image name",
        )
    return load_definition_file(path)[0]


def load_definition_file(path: Path) -> tuple[ImageDefinition, dict[str, int]]:
    """The definition and the line of each top-level key and requirement (`requirements.3`),
    so that a refusal can point at the line to change."""
    data, where_written = read_yaml(
        path,
        "image definition",
        "an image definition is a mapping of keys such as `name`, `python`, `torch`",
        "see images/lab-cpu.yaml",
    )
    lines = dotted(where_written)
    try:
        return ImageDefinition.model_validate(data), lines
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(map(str, first["loc"]))
        line = lines.get(field) or lines.get(str(first["loc"][0]) if first["loc"] else "", 0)
        where = f"{path}:{line}" if line else str(path)
        raise UsageError(f"{where}: {field}: {first['msg']}") from None
