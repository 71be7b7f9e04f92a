"""Lambda's catalog as the fake serves it: instance types, regions and images.

Types and specs are the rows of the reference's §4.2 (late-2025 captures); regions and their
descriptions are §4.3. Prices are illustrative (they change weekly on the real service).
Which (type, region) pairs start with capacity is the fake's own choice, made so that the
common single-GPU types can be launched in a few regions and some types are sold out.
"""

from __future__ import annotations

import uuid
from typing import Any

REGIONS: dict[str, str] = {
    "us-east-1": "Virginia, USA", "us-east-2": "Washington DC, USA",
    "us-east-3": "Washington DC, USA", "us-west-1": "California, USA",
    "us-west-2": "Arizona, USA", "us-west-3": "Utah, USA", "us-south-1": "Texas, USA",
    "us-south-2": "North Texas, USA", "us-south-3": "Central Texas, USA",
    "us-midwest-1": "Illinois, USA", "us-midwest-2": "Ohio, USA",
    "europe-central-1": "Germany", "asia-south-1": "India",
    "asia-northeast-1": "Osaka, Japan", "asia-northeast-2": "Tokyo, Japan",
    "me-west-1": "Israel", "australia-east-1": "Sydney, Australia",
}  # fmt: skip

# name: (description, gpu_description, price_cents_per_hour, vcpus, memory_gib, storage_gib, gpus)
TYPES: dict[str, tuple[str, str, int, int, int, int, int]] = {
    "gpu_1x_a10": ("1x A10 (24 GB PCIe)", "A10 (24 GB PCIe)", 75, 30, 200, 1400, 1),
    "gpu_1x_rtx6000": ("1x RTX 6000 (24 GB)", "RTX 6000 (24 GB)", 50, 14, 46, 512, 1),
    "gpu_1x_a6000": ("1x A6000 (48 GB)", "A6000 (48 GB)", 80, 14, 100, 200, 1),
    "gpu_2x_a6000": ("2x A6000 (48 GB)", "A6000 (48 GB)", 160, 28, 200, 1024, 2),
    "gpu_4x_a6000": ("4x A6000 (48 GB)", "A6000 (48 GB)", 320, 56, 400, 1024, 4),
    "gpu_1x_a100": ("1x A100 (40 GB PCIe)", "A100 (40 GB PCIe)", 129, 30, 200, 512, 1),
    "gpu_1x_a100_sxm4": ("1x A100 (40 GB SXM4)", "A100 (40 GB SXM4)", 129, 30, 200, 512, 1),
    "gpu_2x_a100": ("2x A100 (40 GB PCIe)", "A100 (40 GB PCIe)", 258, 60, 400, 1024, 2),
    "gpu_4x_a100": ("4x A100 (40 GB PCIe)", "A100 (40 GB PCIe)", 516, 120, 800, 1024, 4),
    "gpu_8x_a100": ("8x A100 (40 GB SXM4)", "A100 (40 GB SXM4)", 1032, 124, 1800, 6144, 8),
    "gpu_8x_a100_80gb_sxm4": ("8x A100 (80 GB SXM4)", "A100 (80 GB SXM4)", 1432, 240, 1800,
                              20480, 8),
    "gpu_8x_v100": ("8x Tesla V100 (16 GB)", "Tesla V100 (16 GB)", 440, 92, 448, 5888, 8),
    "gpu_1x_h100_pcie": ("1x H100 (80 GB PCIe)", "H100 (80 GB PCIe)", 249, 26, 200, 1024, 1),
    "gpu_1x_h100_sxm5": ("1x H100 (80 GB SXM5)", "H100 (80 GB SXM5)", 329, 26, 225, 2816, 1),
    "gpu_2x_h100_sxm5": ("2x H100 (80 GB SXM5)", "H100 (80 GB SXM5)", 638, 52, 450, 5632, 2),
    "gpu_4x_h100_sxm5": ("4x H100 (80 GB SXM5)", "H100 (80 GB SXM5)", 1236, 104, 900, 11264, 4),
    "gpu_8x_h100_sxm5": ("8x H100 (80 GB SXM5)", "H100 (80 GB SXM5)", 2392, 208, 1800, 22528, 8),
    "gpu_1x_gh200": ("1x GH200 (96 GB)", "GH200 (96 GB)", 149, 64, 432, 4096, 1),
    "gpu_1x_b200_sxm6": ("1x B200 (180 GB SXM6)", "B200 (180 GB SXM6)", 599, 26, 360, 2816, 1),
    "gpu_2x_b200_sxm6": ("2x B200 (180 GB SXM6)", "B200 (180 GB SXM6)", 1198, 52, 720, 5632, 2),
    "gpu_8x_b200_sxm6": ("8x B200 (180 GB SXM6)", "B200 (180 GB SXM6)", 4792, 208, 2900,
                         22528, 8),
    "cpu_4x_general": ("4x CPU General (16 GiB)", "N/A", 20, 4, 16, 100, 0),
}  # fmt: skip

# Starting capacity: units per (type, region). Anything not listed starts sold out.
START_CAPACITY: dict[tuple[str, str], int] = {
    **{(t, r): 8 for t in ("gpu_1x_a10", "gpu_1x_a100", "gpu_1x_h100_pcie", "cpu_4x_general")
       for r in ("us-east-1", "us-west-1", "us-south-1")},
    **{(t, r): 4 for t in ("gpu_8x_h100_sxm5", "gpu_8x_a100") for r in ("us-west-3", "us-south-2")},
    ("gpu_1x_a6000", "us-west-2"): 4,
    ("gpu_1x_h100_sxm5", "us-east-3"): 4,
    ("gpu_8x_a100_80gb_sxm4", "us-west-3"): 2,
    ("gpu_1x_b200_sxm6", "us-east-1"): 2,
}  # fmt: skip

IMAGE_FAMILIES: dict[str, str] = {
    "lambda-stack-22-04": "AI ready GPU image with CUDA, Docker, and ML frameworks",
    "lambda-stack-24-04": "AI ready GPU image with CUDA, Docker, and ML frameworks",
    "gpu-base-24-04": "GPU base image with CUDA and Docker enabled",
    "ubuntu-22-04": "Ubuntu 22.04",
    "ubuntu-24-04": "Ubuntu 24.04",
}
IMAGE_REGIONS = ("us-east-1", "us-west-1", "us-south-1", "us-west-3")


def region_json(name: str) -> dict[str, str]:
    return {"name": name, "description": REGIONS[name]}


def type_json(name: str) -> dict[str, Any]:
    desc, gpu_desc, cents, vcpus, mem, disk, gpus = TYPES[name]
    return {
        "name": name, "description": desc, "gpu_description": gpu_desc,
        "price_cents_per_hour": cents,
        "specs": {"vcpus": vcpus, "memory_gib": mem, "storage_gib": disk, "gpus": gpus},
    }  # fmt: skip


def images_json() -> list[dict[str, Any]]:
    """One entry per image per region, ids hyphenated UUIDs as in the spec (stable per name)."""
    out = []
    for family, description in IMAGE_FAMILIES.items():
        for region in IMAGE_REGIONS:
            out.append({
                "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpujob-lab/{family}/{region}")),
                "created_time": "2025-10-01T00:00:00.000Z",
                "updated_time": "2025-10-01T00:00:00.000Z",
                "name": family, "description": description, "family": family,
                "version": "2025.10.01", "architecture": "x86_64", "region": region_json(region),
            })  # fmt: skip
    return out
