"""The compatibility rules of shared/reference/wheels.md, applied to a definition before any
download: each broken rule is a `Refusal` naming the rule, the field, and the nearest pins
that would work, so an impossible stack is refused in a second, not found in minute 30."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from launcher.images.catalog import Catalog, cuda_version
from launcher.spec.image import ImageDefinition

FAMILY = ("torch", "torchvision", "torchaudio", "flash-attn", "deepspeed")


@dataclass(frozen=True)
class Refusal:
    """A pin the rules refuse: which rule, at which field, why, and the nearest pins that
    would pass (so the error says what to write instead)."""

    rule: str
    field: str
    message: str
    nearest: str = ""

    def text(self) -> str:
        nearest = f"; nearest valid pins: {self.nearest}" if self.nearest else ""
        return f"{self.message} (rule: {self.rule}){nearest}"


@dataclass(frozen=True)
class Stack:
    """The torch build a definition asks for, with its label split off."""

    torch: str
    variant: str
    python: str

    @property
    def cp(self) -> str:
        return f"cp{self.python.replace('.', '')}"

    @property
    def minor(self) -> str:
        return ".".join(self.torch.split(".")[:2])


def stack_of(definition: ImageDefinition) -> tuple[Stack, list[Refusal]]:
    version, _, label = definition.torch.partition("+")
    variant = definition.cuda
    refusals = []
    if label and "cuda" in definition.model_fields_set and label != definition.cuda:
        refusals.append(
            Refusal(
                "one-cuda-variant",
                "torch",
                f"torch {definition.torch} names {label} but cuda is {definition.cuda}",
                f"torch: {version}, cuda: {label}",
            )
        )
    elif label:
        variant = label
    return Stack(version, variant, definition.python), refusals


def check(definition: ImageDefinition, catalog: Catalog) -> list[Refusal]:
    """Every rule the definition breaks, in field order; empty when it may be resolved."""
    stack, refusals = stack_of(definition)
    release = catalog.torch(stack.torch)
    if release is None:
        return [*refusals, _no_such_torch(stack, catalog)]
    if stack.variant not in release["variants"]:
        refusals.append(_unpublished_variant(stack, release, catalog))
    if release["python"] and stack.cp not in release["python"]:
        refusals.append(
            Refusal(
                "torch-python",
                "python",
                f"torch {stack.torch} has no {stack.cp} wheel (it has {_span(release['python'])})",
                f'python: "{_cp_to_python(release["python"][-1])}"',
            )
        )
    refusals += _indexes(definition, catalog)
    refusals += _base_python(definition, catalog)
    refusals += _partners(definition, stack, release, catalog)
    if definition.flash_attn:
        refusals += _flash_attn(definition.flash_attn, stack, catalog)
    refusals += _requirements(definition, stack, catalog)
    if definition.deepspeed and not definition.deepspeed.wheel:
        refusals.append(Refusal("no-compile", "deepspeed", catalog.data["sdist_only"]["deepspeed"]))
    return refusals


def _no_such_torch(stack: Stack, catalog: Catalog) -> Refusal:
    versions = catalog.torch_versions()
    try:
        wanted = Version(stack.torch)
    except InvalidVersion:
        wanted = Version("0")
    lower = [v for v in versions if Version(v) < wanted][-1:]
    higher = [v for v in versions if Version(v) > wanted][:1]
    nearest = ", ".join(f"torch {v}" for v in lower + higher)
    return Refusal(
        "torch-exists",
        "torch",
        f"torch {stack.torch} does not exist (catalog of "
        f"{catalog.data['snapshot']}: {versions[0]} to {versions[-1]})",
        nearest,
    )


def _unpublished_variant(stack: Stack, release: dict, catalog: Catalog) -> Refusal:
    published = release["variants"]
    others = [v for v in catalog.torch_versions() if stack.variant in catalog.torch(v)["variants"]]  # type: ignore[index]
    nearest = [f"torch {stack.torch}+{_closest(stack.variant, published)}"]
    if others:
        nearest.append(f"torch {others[-1]}+{stack.variant}")
    return Refusal(
        "cuda-variant-published",
        "cuda",
        f"PyTorch never published torch {stack.torch} as {stack.variant} "
        f"(published: {', '.join(published)})",
        " or ".join(nearest),
    )


def _closest(variant: str, published: list[str]) -> str:
    cudas = [v for v in published if v.startswith("cu")]
    if not variant.startswith("cu") or not cudas:
        return published[0]
    return min(cudas, key=lambda v: (abs(int(v[2:]) - int(variant[2:])), -int(v[2:])))


def _indexes(definition: ImageDefinition, catalog: Catalog) -> list[Refusal]:
    refusals = []
    for index, url in enumerate(definition.indexes):
        for fake, why in catalog.data["not_indexes"].items():
            if url.startswith(fake):
                nearest = "drop it; flash-attn comes from its GitHub release (flash_attn: VERSION)"
                refusals.append(Refusal("real-index", f"indexes.{index}", f"{url}: {why}", nearest))
    return refusals


def _base_python(definition: ImageDefinition, catalog: Catalog) -> list[Refusal]:
    known = catalog.base_image(definition.base)
    base_python = definition.base_python or (known or {}).get("python")
    if base_python is None or base_python == definition.python:
        return []
    return [
        Refusal(
            "base-python",
            "python",
            f"base image {definition.base} has Python {base_python}, the wheels are "
            f"cp{definition.python.replace('.', '')}",
            f'python: "{base_python}" or a base image with Python {definition.python}',
        )
    ]


def _partners(
    definition: ImageDefinition, stack: Stack, release: dict, catalog: Catalog
) -> list[Refusal]:
    refusals = []
    for package in ("torchvision", "torchaudio"):
        pinned = getattr(definition, package)
        partner = release[package]
        if pinned is None or pinned.split("+")[0] == partner:
            continue
        owner = [
            v for v in catalog.torch_versions() if catalog.torch(v)[package] == pinned.split("+")[0]
        ]  # type: ignore[index]
        belongs = f"; {pinned} belongs to torch {owner[0]}" if owner else ""
        if partner is None:
            message = f"{package} has no release for torch {stack.torch}{belongs}"
            nearest = f"drop {package}"
        else:
            message = f"{package} {pinned} does not pair with torch {stack.torch}{belongs}"
            nearest = f"{package}: {partner}"
        refusals.append(Refusal(f"{package}-pairs-with-torch", package, message, nearest))
    return refusals


def _flash_attn(version: str, stack: Stack, catalog: Catalog) -> list[Refusal]:
    cuda = cuda_version(stack.variant)
    if cuda is None:
        return [
            Refusal(
                "flash-attn-needs-cuda",
                "flash_attn",
                f"flash-attn has no CPU build; torch {stack.torch} here is {stack.variant}",
                "drop flash_attn, or a cuXYZ torch",
            )
        ]
    if version not in catalog.flash_attn_versions():
        return [
            Refusal(
                "flash-attn-exists",
                "flash_attn",
                f"flash-attn {version} is not an official 2.x release with wheels in the catalog",
                _nearest_flash_attn(stack, catalog),
            )
        ]
    tag = catalog.flash_attn_cuda_tag(version, cuda.split(".")[0])
    abi = catalog.cxx11abi(stack.torch, stack.variant)
    pair = f"torch {stack.minor} + cu{tag or cuda.split('.')[0]} ({stack.cp})"
    if Version(stack.torch) >= Version(catalog.data["flash_attn_no_official_wheel_from_torch"]):
        return [
            Refusal(
                "flash-attn-wheel-exists",
                "flash_attn",
                f"flash-attn {version} has no wheel for {pair}: no official flash-attn 2 "
                f"wheel exists for torch ≥ 2.9",
                _nearest_flash_attn(stack, catalog),
            )
        ]
    rows = [
        r
        for r in catalog.flash_attn_rows
        if r.version == version
        and r.torch == stack.minor
        and tag in r.cuda
        and stack.cp in r.python
    ]
    if not rows:
        return [
            Refusal(
                "flash-attn-wheel-exists",
                "flash_attn",
                f"flash-attn {version} has no wheel for {pair}",
                _nearest_flash_attn(stack, catalog, version),
            )
        ]
    if str(abi).upper() != rows[0].correct_abi:
        return [
            Refusal(
                "flash-attn-cxx11abi",
                "flash_attn",
                f"flash-attn {version}'s cxx11abi{str(abi).upper()} wheel for torch "
                f"{stack.minor} was built against a cxx11abi{rows[0].correct_abi} torch "
                f"and fails to import on torch {stack.torch}+{stack.variant}",
                _nearest_flash_attn(stack, catalog, version),
            )
        ]
    return []


def flash_attn_candidates(stack: Stack, catalog: Catalog) -> list[str]:
    """flash-attn versions with a correctly labelled wheel for this torch minor, CUDA, cp."""
    cuda = cuda_version(stack.variant)
    if cuda is None:
        return []
    abi = str(catalog.cxx11abi(stack.torch, stack.variant)).upper()
    found = {
        r.version
        for r in catalog.flash_attn_rows
        if r.torch == stack.minor
        and stack.cp in r.python
        and r.correct_abi == abi
        and catalog.flash_attn_cuda_tag(r.version, cuda.split(".")[0]) in r.cuda
    }
    return sorted(found, key=Version)


def _nearest_flash_attn(stack: Stack, catalog: Catalog, version: str | None = None) -> str:
    options = []
    here = flash_attn_candidates(stack, catalog)
    if here:
        options.append(f"flash-attn {here[-1]} with torch {stack.torch}+{stack.variant}")
    if version:
        minors = sorted(
            {
                r.torch
                for r in catalog.flash_attn_rows
                if r.version == version and stack.cp in r.python
            },
            key=Version,
        )
        if minors:
            options.append(f"flash-attn {version} with torch {minors[-1]}.x ({stack.cp})")
        pythons = sorted(
            {
                r.python[-1]
                for r in catalog.flash_attn_rows
                if r.version == version and r.torch == stack.minor
            }
        )
        if pythons and stack.cp not in pythons[-1:]:
            options.append(f"flash-attn {version} with python {_cp_to_python(pythons[-1])}")
    if not options:
        options.append("torch 2.8.0+cu128 with flash-attn 2.8.3 (the newest official pair)")
    return " or ".join(options)


def _requirements(definition: ImageDefinition, stack: Stack, catalog: Catalog) -> list[Refusal]:
    refusals = []
    for index, pin in enumerate(definition.requirements):
        name, _, version = pin.partition("==")
        key = canonicalize_name(name.split("[")[0])
        field = f"requirements.{index}"
        if key in FAMILY:
            refusals.append(
                Refusal(
                    "one-place-per-pin",
                    field,
                    f"{key} is pinned by its own field, not in requirements",
                    f"{key.replace('-', '_')}: {version}",
                )
            )
        limit = catalog.data["numpy_below_2_until_torch"]
        if (
            key == "numpy"
            and Version(stack.minor) <= Version(limit)
            and Version(version) >= Version("2")
        ):
            refusals.append(
                Refusal(
                    "numpy-bounds",
                    field,
                    f"torch {stack.torch} was built against NumPy 1.x and fails on numpy {version}",
                    "numpy==1.26.4",
                )
            )
    return refusals


def _span(tags: list[str]) -> str:
    return f"{tags[0]}–{tags[-1]}" if len(tags) > 1 else tags[0]


def _cp_to_python(tag: str) -> str:
    return f"{tag[2]}.{tag[3:]}"
