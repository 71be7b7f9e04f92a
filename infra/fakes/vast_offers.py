"""Vast offers and the search query language (`POST /api/v0/bundles/`, reference §2).

A filter is `"field": {"op": value}` with eq, neq, gt, gte, lt, lte, in, notin; several
operators on one field all apply. `geolocation` is matched on its two-letter country code.
GPU names are matched exactly, spaces and all: the underscore spelling (`RTX_4090`) is CLI
input syntax the CLI rewrites, and whether the server accepts it is unknown [U]; here it
matches nothing, so a client that forgets the rewrite finds no offers instead of working by
luck. A field no offer has is refused with 400 (the real server's answer is unknown [U]):
a misspelt filter must not silently widen a search.
"""

from __future__ import annotations

import copy
from typing import Any

CONTROL_KEYS = {"order", "type", "limit", "allocated_storage", "disable_bundling", "chunked",
                "georegion", "select_cols"}  # fmt: skip
OPS = ("eq", "neq", "gt", "gte", "lt", "lte", "in", "notin")
DEFAULT_LIMIT = 64
DEFAULT_STORAGE_GB = 8.0  # the OpenAPI text says 8; the CLI sends 5 by default [U]

# (gpu_name, num_gpus, gpu_ram MB, dph_base, reliability, verified, cuda_max_good,
#  disk_space GB, geolocation, direct_port_count, compute_cap)
SEED: list[tuple[str, int, int, float, float, bool, float, float, str, int, int]] = [
    ("RTX 4090", 1, 24564, 0.35, 0.9951, True, 12.4, 512.0, "Nevada, US", 100, 890),
    ("RTX 4090", 2, 24564, 0.68, 0.9700, False, 12.2, 256.0, "Quebec, CA", 50, 890),
    ("RTX 4090", 1, 24564, 0.42, 0.9990, True, 12.8, 100.0, "Texas, US", 0, 890),
    ("RTX 3090", 1, 24576, 0.18, 0.9900, True, 12.2, 200.0, "Mazowieckie, PL", 20, 860),
    ("A100 SXM4", 1, 81920, 1.10, 0.9980, True, 12.4, 1000.0, "Oregon, US", 100, 800),
    ("A100 SXM4", 8, 81920, 8.40, 0.9950, True, 12.4, 4000.0, "Virginia, US", 200, 800),
    ("A100 PCIE", 2, 40960, 1.60, 0.9600, True, 12.0, 500.0, ", US", 40, 800),
    ("H100 SXM", 8, 81559, 17.50, 0.9990, True, 12.8, 8000.0, "Utah, US", 200, 900),
    ("H100 SXM", 1, 81559, 2.20, 0.9900, True, 12.8, 1000.0, "Hesse, DE", 100, 900),
    ("H100 PCIE", 1, 81559, 1.80, 0.9850, True, 12.6, 800.0, "Ontario, CA", 60, 900),
    ("L40S", 4, 46068, 3.20, 0.9900, True, 12.4, 1500.0, "Washington, US", 80, 890),
    ("RTX A6000", 1, 49140, 0.45, 0.9300, False, 11.8, 300.0, "Stockholm, SE", 30, 860),
    ("Tesla V100", 1, 16384, 0.12, 0.9000, False, 11.4, 100.0, ", IN", 10, 700),
    ("H200", 8, 143771, 25.00, 0.9990, True, 12.8, 10000.0, "California, US", 200, 900),
    # what SkyPilot's recipes ask for most (L4, T4, A10, L40, RTX 5090, B200); appended so
    # the ids above stay as they were
    ("L4", 1, 23034, 0.28, 0.9950, True, 12.4, 500.0, "Oregon, US", 60, 890),
    ("L4", 2, 23034, 0.55, 0.9920, True, 12.4, 800.0, "Ohio, US", 60, 890),
    ("Tesla T4", 1, 15360, 0.10, 0.9900, True, 12.2, 200.0, "Texas, US", 40, 750),
    ("A10", 1, 23028, 0.30, 0.9910, True, 12.4, 300.0, "Virginia, US", 40, 860),
    ("L40", 1, 46068, 0.70, 0.9900, True, 12.4, 600.0, "Nevada, US", 40, 890),
    ("RTX 5090", 1, 32607, 0.60, 0.9930, True, 12.8, 400.0, "Bavaria, DE", 80, 1200),
    ("B200", 8, 183359, 36.00, 0.9990, True, 12.8, 12000.0, "Texas, US", 200, 1000),
    # machines of physical clusters (their `cluster_id` in CLUSTERS): one alone in cluster
    # 3001, the cheapest; two in cluster 3002, where a 2-node job fits
    ("H100 SXM", 1, 81559, 2.30, 0.9950, True, 12.8, 1000.0, "Utah, US", 100, 900),
    ("H100 SXM", 1, 81559, 2.40, 0.9950, True, 12.8, 1000.0, "Texas, US", 100, 900),
    ("H100 SXM", 1, 81559, 2.45, 0.9950, True, 12.8, 1000.0, "Texas, US", 100, 900),
]
CLUSTERS = {22: 3001, 23: 3002, 24: 3002}
"""Seed row number -> the physical cluster its machine is in; `cluster_id` is null for the
rest (vast-cli `search offers cluster_id!=None`, Vast's multi-node guide)."""


def seed_offers() -> dict[int, dict[str, Any]]:
    """The §2.3 fields for each seed row; values illustrative, units as the API's (MB, GB)."""
    offers = {}
    for n, row in enumerate(SEED, start=1):
        gpu, count, ram, dph, rel, verified, cuda, disk, geo, ports, cap = row
        offer_id = 12345600 + n
        offers[offer_id] = {
            "id": offer_id, "ask_contract_id": offer_id, "bundle_id": 987654300 + n,
            "machine_id": 88000 + n, "host_id": 55000 + n,
            "num_gpus": count, "gpu_name": gpu, "gpu_ram": ram, "gpu_total_ram": ram * count,
            "gpu_frac": 1.0, "gpu_arch": "nvidia", "compute_cap": cap, "cuda_max_good": cuda,
            "driver_version": "550.54.14", "driver_vers": 550054014,
            "cpu_name": "AMD EPYC 7543 32-Core", "cpu_cores": 128,
            "cpu_cores_effective": 16.0 * count, "cpu_ram": 257000, "cpu_arch": "amd64",
            "disk_space": disk, "disk_bw": 3000.0, "inet_up": 850.0, "inet_down": 900.0,
            "direct_port_count": ports, "pci_gen": 4.0, "pcie_bw": 24.5,
            "dph_base": dph, "dph_total": dph, "min_bid": round(dph * 0.6, 4),
            "storage_cost": 0.15, "inet_up_cost": 0.002, "inet_down_cost": 0.002,
            "dlperf": 75.1 * count, "dlperf_per_dphtotal": round(75.1 * count / dph, 1),
            "total_flops": 82.6 * count, "score": round(100 * rel * count + 1 / dph, 2),
            "reliability": rel, "reliability2": rel,
            "verification": "verified" if verified else "unverified",
            "rentable": True, "rented": False, "is_bid": False, "external": False,
            "hosting_type": 1 if verified else 0, "static_ip": True,
            # Documentation-range address: an offer's IP is never dialled; the instance
            # reports the lab host's address instead.
            "public_ipaddr": f"203.0.113.{n}", "geolocation": geo,
            "duration": 2592000.0, "end_date": 1893456000, "start_date": 1761000000.0,
            "vms_enabled": False, "cluster_id": CLUSTERS.get(n),
        }  # fmt: skip
    return offers


class QueryError(ValueError):
    """A query the server refuses; the API answers 400 with it."""


def _derived(offer: dict[str, Any], field: str) -> Any:
    """Filter fields that are not offer columns but that clients send."""
    if field == "verified":
        return offer["verification"] == "verified"
    if field == "datacenter":
        return offer["hosting_type"] >= 1
    return offer[field]


def _test(value: Any, op: str, operand: Any, field: str) -> bool:
    if field == "geolocation" and isinstance(value, str):
        value = value.strip()[-2:]
    if op in ("in", "notin"):
        if not isinstance(operand, list):
            raise QueryError(f"{field}: {op} takes a list")
        return (value in operand) == (op == "in")
    if op == "eq":
        return value == operand
    if op == "neq":
        return value != operand
    if value is None or operand is None:
        return False
    try:
        return {"gt": value > operand, "gte": value >= operand, "lt": value < operand,
                "lte": value <= operand}[op]  # fmt: skip
    except TypeError:
        raise QueryError(f"{field}: cannot compare {value!r} with {operand!r}") from None


def matches(offer: dict[str, Any], field: str, condition: Any) -> bool:
    if field not in offer and field not in ("verified", "datacenter"):
        raise QueryError(f"Error in query parameters: {field} is not a valid search key")
    if not isinstance(condition, dict):
        condition = {"eq": condition}  # a bare value: taken as eq [U]
    for op, operand in condition.items():
        if op not in OPS:
            raise QueryError(f"{field}: unknown operator {op!r}; known: {', '.join(OPS)}")
        if not _test(_derived(offer, field), op, operand, field):
            return False
    return True


def priced(offer: dict[str, Any], storage_gb: float, kind: str) -> dict[str, Any]:
    """A copy priced for `storage_gb` of disk; `bid` (interruptible) prices at `min_bid`."""
    out = copy.deepcopy(offer)
    base = offer["min_bid"] if kind == "bid" else offer["dph_base"]
    disk_hour = storage_gb * offer["storage_cost"] / 30 / 24
    out["dph_total"] = round(base + disk_hour, 4)
    out["is_bid"] = kind == "bid"
    out["search"] = {"gpuCostPerHour": base, "diskHour": round(disk_hour, 4),
                     "totalHour": out["dph_total"]}  # fmt: skip
    return out


def search(offers: list[dict[str, Any]], query: dict[str, Any]) -> list[dict[str, Any]]:
    kind = query.get("type", "on-demand")
    if kind not in ("on-demand", "ondemand", "bid", "reserved", "interruptible"):
        raise QueryError(f"unknown type {kind!r}")
    kind = "bid" if kind == "interruptible" else kind
    storage = float(query.get("allocated_storage") or DEFAULT_STORAGE_GB)
    limit = int(query.get("limit") or DEFAULT_LIMIT)
    filters = {k: v for k, v in query.items() if k not in CONTROL_KEYS}
    found = [priced(o, storage, kind) for o in offers
             if all(matches(o, f, c) for f, c in filters.items())]  # fmt: skip
    order = query.get("order") or [["score", "desc"]]
    for item in reversed(order):  # stable sorts, last key first
        field, direction = [*item, "asc"][:2] if isinstance(item, list) else (item, "asc")
        if found and field not in found[0]:
            raise QueryError(f"cannot order by {field!r}")
        desc = direction == "desc"  # missing values last either way
        found.sort(key=lambda o, f=field, d=desc: ((o[f] is None) != d, o[f]), reverse=desc)
    return found[:limit]
