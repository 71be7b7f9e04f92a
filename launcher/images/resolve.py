"""Definition + catalog + the wheels the indexes offer -> Lock, or the refusals that explain
why not. Pure: the same inputs give the same lock, byte for byte."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from launcher.images import rules
from launcher.images.catalog import Catalog, cuda_version
from launcher.images.lock import Lock
from launcher.images.rules import Refusal, Stack
from launcher.images.wheels import WheelRecord, best_wheel, flash_attn_wheel, torch_family_wheel
from launcher.spec.image import ImageDefinition

FAMILY_INDEX = ("torch", "torchvision", "torchaudio")
CUDA_RUNTIME = (
    "nvidia-cuda-runtime-cu11",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-runtime",
    "nvidia-cuda-runtime-cu13",
    "cuda-toolkit",
)


class Refused(Exception):
    """The definition cannot be locked; `refusals` says every rule it breaks."""

    def __init__(self, refusals: list[Refusal]) -> None:
        super().__init__("; ".join(r.text() for r in refusals))
        self.refusals = refusals


def pins_of(definition: ImageDefinition, stack: Stack) -> list[tuple[str, str, str]]:
    """(field, name, version) for every pin, family first, as the definition orders them."""
    pins = [("torch", "torch", stack.torch)]
    for field in ("torchvision", "torchaudio", "flash_attn"):
        version = getattr(definition, field)
        if version:
            pins.append((field, field.replace("_", "-"), version.split("+")[0]))
    if definition.deepspeed:
        pins.append(("deepspeed", "deepspeed", definition.deepspeed.version))
    for index, pin in enumerate(definition.requirements):
        name, _, version = pin.partition("==")
        pins.append((f"requirements.{index}", name, version))
    return pins


def resolve(
    definition: ImageDefinition,
    catalog: Catalog,
    offered: Mapping[str, list[WheelRecord]],
    definition_text: str,
    glibc: str = "2.28",
) -> Lock:
    refusals = rules.check(definition, catalog)
    if refusals:
        raise Refused(refusals)
    stack, _ = rules.stack_of(definition)
    chosen: dict[str, tuple[str, WheelRecord]] = {}
    for field, name, version in pins_of(definition, stack):
        record = _pick(definition, catalog, stack, name, version, offered, glibc)
        if record is None:
            refusals.append(_no_wheel(field, name, version, stack, offered))
        else:
            chosen[canonicalize_name(name.split("[")[0])] = (field, record)
    refusals += _closure(chosen, stack.python)
    if refusals:
        raise Refused(refusals)
    packages = [record.locked() for _, (_, record) in sorted(chosen.items())]
    abi = catalog.cxx11abi(stack.torch, stack.variant)
    notes = [f"{p.filename}: sha256 unknown here; {p.source}" for p in packages if p.sha256 is None]
    unread = [p.name for p in packages if p.requires is None]
    if unread:
        notes.append(
            "Requires-Dist not readable here (no metadata served, no local copy), so the closure "
            f"is unchecked for: {', '.join(unread)}"
        )
    return Lock(
        name=definition.name,
        base=definition.base,
        python=definition.python,
        torch=chosen["torch"][1].version,
        cuda=stack.variant,
        cxx11abi=abi,
        catalog_sha256=catalog.sha256,
        definition_sha256=hashlib.sha256(definition_text.encode()).hexdigest(),
        packages=packages,
        notes=notes,
        deepspeed_ops=sorted(definition.deepspeed.ops) if definition.deepspeed else [],
    )


def _pick(
    definition: ImageDefinition,
    catalog: Catalog,
    stack: Stack,
    name: str,
    version: str,
    offered: Mapping[str, list[WheelRecord]],
    glibc: str,
) -> WheelRecord | None:
    key = canonicalize_name(name.split("[")[0])
    records = offered.get(key, [])
    if key in FAMILY_INDEX:
        return _torch_family(catalog, stack, key, version, records, glibc)
    if key == "flash-attn":
        return _flash_attn(catalog, stack, version, records)
    if key == "deepspeed" and definition.deepspeed and definition.deepspeed.wheel:
        wheel = definition.deepspeed.wheel
        return WheelRecord(
            "deepspeed",
            version,
            wheel.rsplit("/", 1)[-1],
            wheel,
            definition.deepspeed.sha256,
            "definition (prebuilt wheel)",
            notes=(f"ops prebuilt: {', '.join(definition.deepspeed.ops) or 'none'}",),
        )
    exact = [r for r in records if Version(r.version) == Version(version)]
    return best_wheel(exact, stack.python, glibc)


def _torch_family(
    catalog: Catalog,
    stack: Stack,
    key: str,
    version: str,
    records: list[WheelRecord],
    glibc: str,
) -> WheelRecord:
    """The variant's own build if an index offers it; PyPI's unlabelled build when PyPI's
    CUDA is that variant (catalog `pypi_cuda`); else the download.pytorch.org file by name."""
    release = catalog.torch(stack.torch) or {}
    labelled = [r for r in records if r.version == f"{version}+{stack.variant}"]
    plain = [r for r in records if r.version == version]
    pick = best_wheel(labelled, stack.python, glibc)
    if pick is None and release.get("pypi_cuda") == stack.variant:
        pick = best_wheel(plain, stack.python, glibc)
        built_for = wheel_cuda(pick.requires) if pick else None
        if pick is not None and built_for not in (None, cuda_version(stack.variant)):
            pick = None  # the catalog's pypi_cuda is wrong for this file: trust the file
        if pick is not None:
            note = f"PyPI's {key} {version} is its {stack.variant} build (catalog: pypi_cuda)"
            return WheelRecord(**{**pick.__dict__, "notes": (*pick.notes, note)})
    if pick is not None:
        return pick
    return torch_family_wheel(catalog, key, version, stack.variant, stack.python, stack.torch)


def wheel_cuda(requires: tuple[str, ...] | None) -> str | None:
    """The CUDA a torch wheel was built for, read from its CUDA runtime requirement."""
    for line in requires or ():
        requirement = Requirement(line)
        pins = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        if canonicalize_name(requirement.name) in CUDA_RUNTIME and pins:
            return ".".join(pins[0].split(".")[:2])
    return None


def _flash_attn(
    catalog: Catalog, stack: Stack, version: str, records: list[WheelRecord]
) -> WheelRecord:
    cuda_major = stack.variant[2:-1]
    tag = catalog.flash_attn_cuda_tag(version, cuda_major) or cuda_major
    abi = catalog.cxx11abi(stack.torch, stack.variant)
    wanted = flash_attn_wheel(catalog, version, tag, stack.minor, abi, stack.python)
    same = [r for r in records if r.filename == wanted.filename and r.sha256]
    requires = catalog.data.get("requires", {}).get(f"flash-attn=={version}")
    record = same[0] if same else wanted
    if record.requires is None and requires is not None:
        record = WheelRecord(**{**record.__dict__, "requires": tuple(requires)})
    return record


def _no_wheel(
    field: str, name: str, version: str, stack: Stack, offered: Mapping[str, list[WheelRecord]]
) -> Refusal:
    key = canonicalize_name(name.split("[")[0])
    versions = sorted({r.version for r in offered.get(key, [])}, key=Version)
    nearest = ", ".join(f"{name}=={v}" for v in versions[-3:])
    return Refusal(
        "wheel-exists",
        field,
        f"{name}=={version} has no wheel for {stack.cp} on Linux x86_64 in the indexes read "
        f"(an sdist would compile)",
        nearest,
    )


def _closure(chosen: dict[str, tuple[str, WheelRecord]], python: str) -> list[Refusal]:
    """Every requirement of every locked wheel (where its metadata is known) is met by
    another locked wheel: no missing package, no two pins that disagree."""
    versions = {key: Version(record.version) for key, (_, record) in chosen.items()}
    extras: dict[str, set[str]] = {key: {""} for key in chosen}
    refusals: list[Refusal] = []
    for _ in range(2):  # extras asked for by one package switch on requirements of another
        refusals = []
        for key, (field, record) in chosen.items():
            for requirement in _active(record, extras[key], python):
                dep = canonicalize_name(requirement.name)
                if dep in extras:
                    extras[dep] |= set(requirement.extras)
                refusal = _unmet(record, requirement, dep, versions, field, chosen)
                if refusal:
                    refusals.append(refusal)
    return refusals


def _active(record: WheelRecord, extras: set[str], python: str) -> list[Requirement]:
    env = {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    active = []
    for line in record.requires or ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        marker: Marker | None = requirement.marker
        if marker is None or any(marker.evaluate({**env, "extra": e}) for e in extras):
            active.append(requirement)
    return active


def _unmet(
    record: WheelRecord,
    requirement: Requirement,
    dep: str,
    versions: dict[str, Version],
    field: str,
    chosen: dict[str, tuple[str, WheelRecord]],
) -> Refusal | None:
    who = f"{record.name} {record.version}"
    if dep not in versions:
        return Refusal(
            "closure-complete",
            field,
            f"{who} requires {requirement.name}{requirement.specifier}, which the definition "
            f"does not pin",
            f"add {requirement.name}==<a version in {requirement.specifier or 'any'}> to "
            f"requirements",
        )
    if requirement.specifier.contains(versions[dep], prereleases=True):
        return None
    other_field = chosen[dep][0]
    return Refusal(
        "dependency-pins-agree",
        other_field,
        f"{who} requires {requirement.name}{requirement.specifier} but "
        f"{requirement.name} {versions[dep]} is pinned",
        f"a {requirement.name} in {requirement.specifier}, or a {record.name} that accepts "
        f"{versions[dep]}",
    )
