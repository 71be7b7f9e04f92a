"""Will this image's CUDA run on that host's driver? Refused at submit with both versions
named, since the failure otherwise shows up as `torch.cuda.is_available() == False` or a
cryptic CUDA error inside the job (a cu130 torch on a 535 driver, wheels.md §5)."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import UsageError
from launcher.images.catalog import Catalog, cuda_version


@dataclass(frozen=True)
class DriverVerdict:
    ok: bool
    required: str | None
    warning: str | None = None


def _parts(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def driver_verdict(cuda_variant: str, host_driver: str, catalog: Catalog) -> DriverVerdict:
    """Minor-version compatibility: a CUDA major needs its family floor (12.x: 525.60.13,
    13.x: 580.65.06); below the toolkit's own driver only a warning (fewer features)."""
    cuda = cuda_version(cuda_variant)
    if cuda is None:
        return DriverVerdict(True, None)
    floor = catalog.driver_floor(cuda.split(".")[0])
    if floor is None:
        return DriverVerdict(True, None, f"no driver floor known for CUDA {cuda}")
    if _parts(host_driver) < _parts(floor):
        return DriverVerdict(False, floor)
    toolkit = catalog.toolkit_driver(cuda)
    if toolkit and _parts(host_driver) < _parts(toolkit):
        return DriverVerdict(
            True,
            floor,
            f"driver {host_driver} is below CUDA {cuda}'s own "
            f"{toolkit}: runs by minor-version compatibility, without PTX JIT",
        )
    return DriverVerdict(True, floor)


def check_driver(image: str, cuda_variant: str, host_driver: str, catalog: Catalog) -> str | None:
    """Raise when the host's driver cannot run the image; return a warning or None. Call it
    wherever a host's driver version is known (nvidia-smi on the host, provider offer)."""
    verdict = driver_verdict(cuda_variant, host_driver, catalog)
    if not verdict.ok:
        raise UsageError(
            f"image {image} is built for CUDA {cuda_version(cuda_variant)} ({cuda_variant}), "
            f"which needs NVIDIA driver >= {verdict.required}; the host has {host_driver}",
            "pick a host with a newer driver, or an image with a cu12x torch (cu126/cu128 run "
            "on >= 525.60.13)",
        )
    return verdict.warning
