"""SkyPilot's `resources` read as gpujob's, for skypilot.py's translation.

Where to rent is gpujob's choice (`--on`, this machine, SLURM, or `--up GPU --provider`), so
SkyPilot's `cloud`, `infra`, `region` and `zone` are preferences: a warning, never a
refusal. Candidate resources (`any_of`, `ordered`, a list or set of accelerators) are kept
whole in `resources.candidates` (spec/candidates.py), and the job is planned for one of them:
the first in the task's order, or the candidate of `--up GPU` (`submit --up` alone asks the
clouds and names the one it chose: targets/cloud/candidates.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from launcher.spec.candidates import candidate_of
from launcher.spec.job import Resources
from launcher.spec.limits import parse_duration
from launcher.spec.yaml_lines import Path_

if TYPE_CHECKING:
    from launcher.spec.skypilot import _Reader as Reader

RESOURCES_REFUSED = {
    "instance_type": "name a GPU in `accelerators` instead; gpujob picks the offer",
    "job_recovery": "recovery is gpujob's `recovery:`; write that instead",
    "accelerator_args": "TPUs are not rented by gpujob",
    "local_disk": "not offered by Lambda or Vast",
    "volumes": "cloud volumes",
    "priority": "no queue here",
    "priority_class": "no queue here",
}
RESOURCES_IGNORED = {"disk_tier", "network_tier", "labels", "ephemeral_storage"}
PREFERENCES = {"cloud", "infra", "region", "zone"}
"""Where SkyPilot would rent: gpujob rents on Lambda and Vast, or not at all."""
TASK_RESOURCES = {"infra", "cloud", "region", "zone", "accelerators", "gpus", "cpus", "memory",
                  "instance_type", "use_spot", "disk_size", "disk_tier", "network_tier",
                  "image_id", "ports", "labels", "max_hourly_cost", "any_of", "ordered",
                  "autostop", "job_recovery", "accelerator_args", "local_disk", "volumes",
                  "priority", "priority_class", "ephemeral_storage"}  # fmt: skip
"""SkyPilot's `resources` keys (§1.3); its internal `_*` ones are refused as unknown."""
GPUJOB_RESOURCES = set(Resources.model_fields) - TASK_RESOURCES
CANDIDATES = ("any_of", "ordered")
ORDER_SAID = {
    "ordered": "the first in the task's order (SkyPilot's failover order); `submit --up` "
    "alone rents the first one a cloud offers",
    "any_of": "the first written; `submit --up` alone rents the cheapest offer of them",
}
CHOOSE = {"ordered": "in_order", "any_of": "cheapest"}
AUTOSTOP_KEYS = ("idle_minutes", "down", "wait_for", "hook", "hook_timeout")
AUTOSTOP_WAIT = "jobs_and_ssh"
"""SkyPilot's `autostop.wait_for` that gpujob's host watcher keeps: idle means no job and no
SSH session. `jobs` (SSH sessions ignored) and `none` (jobs too) would end a host sooner
than gpujob's watcher does, so they are refused rather than kept longer and billed."""
CLOUDS = {"lambda", "vast", "ssh"}
SIZE = re.compile(r"^(?P<n>[0-9]+(\.[0-9]+)?)\s*(?P<unit>GB|GIB|TB|TIB)?\s*(?P<plus>\+)?$", re.I)


def sky_resources(reader: Reader) -> None:
    resources = reader.data.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise reader.refuse(("resources",), "it must be a mapping", "see SkyPilot's YAML spec")
    with reader.collect():
        reader.refuse_both(resources, "gpus", "accelerators")
    fields: dict[str, tuple[Path_, Any]] = {
        str(k): (("resources", str(k)), v) for k, v in resources.items() if k not in CANDIDATES
    }
    with reader.collect():
        fields.update(_chosen_candidate(reader, resources))
    for key, (loc, value) in fields.items():
        with reader.collect():
            _resource(reader, key, loc, value)


def _chosen_candidate(reader: Reader, resources: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of the candidate taken (`any_of`/`ordered`: the first entry, over the
    fields outside it, as SkyPilot merges them); a list or set of accelerators is the same
    choice over one field. Said in the dry run, with every candidate."""
    kinds = [k for k in CANDIDATES if k in resources]
    if len(kinds) > 1:
        raise reader.refuse(("resources", "ordered"), "SkyPilot refuses `any_of` with "
                            "`ordered` too", "keep one")  # fmt: skip
    key = "gpus" if "gpus" in resources else "accelerators"
    accelerators = resources.get(key)
    if kinds:
        kind = kinds[0]
        entries = resources[kind]
        if not isinstance(entries, list) or not entries:
            raise reader.refuse(("resources", kind), "it must be a list of resources",
                                "write `- accelerators: L4:1` entries")  # fmt: skip
        labels, spots = [], []
        for entry in entries:
            if not isinstance(entry, Mapping):
                raise reader.refuse(("resources", kind), "each entry must be a mapping",
                                    "write `- accelerators: L4:1`")  # fmt: skip
            one = entry.get("accelerators", entry.get("gpus", accelerators))
            labels.append(_label(one) if one is not None else "(no GPU)")
            spots.append(entry.get("use_spot", resources.get("use_spot", False)))
        n = _said(reader, ("resources", kind), kind, labels, spots)
        return {str(k): (("resources", kind, n, str(k)), v) for k, v in entries[n].items()}
    if isinstance(accelerators, str) and "," in accelerators:
        accelerators = [a.strip() for a in accelerators.split(",")]
    if isinstance(accelerators, list) or (
        isinstance(accelerators, Mapping) and len(accelerators) > 1
    ):
        items = accelerators if isinstance(accelerators, list) else [
            {name: count} for name, count in accelerators.items()
        ]  # fmt: skip
        labels = [_label(item) for item in items]
        kind = "ordered" if isinstance(accelerators, list) else "any_of"
        n = _said(reader, ("resources", key), kind, labels,
                  [resources.get("use_spot", False)] * len(labels))  # fmt: skip
        return {key: (("resources", key), labels[n])}
    return {}


def _label(value: Any) -> str:
    if isinstance(value, Mapping) and len(value) == 1:
        (name, count), = value.items()  # fmt: skip
        return f"{name}:{count}" if count is not None else str(name)
    return str(value)


def _said(reader: Reader, loc: Path_, kind: str, labels: list[str], spots: list[Any]) -> int:
    """The candidate taken (`--up GPU`'s: the same label first, else the same GPU; else the
    first), said with every candidate; all of them kept in `resources.candidates`."""
    taken = candidate_of(reader.up, labels) if reader.up else None
    if taken is not None:
        why = f"the candidate of `--up {reader.up}`"
    else:
        taken = 0
        why = ORDER_SAID[kind]
        why += "; `--up GPU` takes the candidate of that GPU"
    reader.out.candidates[:] = labels
    reader.out.data.setdefault("resources", {})["candidates"] = {
        "choose": CHOOSE[kind],
        "of": [{"accelerators": None if label == "(no GPU)" else label, "use_spot": spot}
               for label, spot in zip(labels, spots, strict=True)],
    }  # fmt: skip
    reader.out.origins[("resources", "candidates")] = reader.where(*map(str, loc))
    reader.out.notes.append(
        f"{reader.where(*map(str, loc))}: {'.'.join(map(str, loc))}: candidates "
        f"{', '.join(labels)}: gpujob takes {labels[taken]}, {why}"
    )
    return taken


def _resource(reader: Reader, key: str, loc: Path_, value: Any) -> None:
    reader.known(loc, TASK_RESOURCES, GPUJOB_RESOURCES)
    if key in RESOURCES_REFUSED:
        raise reader.refuse(loc, RESOURCES_REFUSED[key], "remove it")
    where = reader.where(*map(str, loc))
    if key in RESOURCES_IGNORED:
        reader.out.warnings.append(f"{where}: {'.'.join(map(str, loc))}: ignored by gpujob")
    elif key in ("accelerators", "gpus"):
        reader.put(("resources", "accelerators"), loc, _accelerators(reader, loc, value))
    elif key == "cpus":
        reader.put(("resources", "cpus"), loc, int(_size(reader, loc, value)))
    elif key == "memory":
        reader.put(("resources", "memory_gb"), loc, _size(reader, loc, value))
    elif key == "disk_size":
        reader.put(("resources", "disk_gb"), loc, int(_size(reader, loc, value)))
    elif key == "use_spot":  # honoured on Vast; `submit --up --provider lambda` refuses it
        reader.put(("resources", "use_spot"), loc, value)
    elif key == "ports":  # forwarded over SSH by submit and port-forward (spec/web.py)
        reader.put(("ports",), loc, value)
    elif key == "max_hourly_cost":
        reader.put(("resources", "max_hourly_cost"), loc, value)
    elif key == "image_id" and len(loc) > 2:  # a candidate's own VM image (any_of/ordered)
        reader.out.warnings.append(
            f"{where}: {'.'.join(map(str, loc))}: a VM image of that "
            "candidate's cloud; ignored (the job's image is the task's)"
        )
    elif key in PREFERENCES:
        reader.out.warnings.append(f"{where}: {'.'.join(map(str, loc))}: {_preference(value)}")
    elif key == "autostop" and value is not False:
        reader.put(("resources", "autostop"), loc, _autostop(reader, loc, value))


def _preference(value: Any) -> str:
    cloud = str(value).split("/")[0].lower()
    if cloud in CLOUDS:
        return "the cloud is chosen at `submit --up GPU --provider`"
    return (f"{value}: a preference gpujob does not rent on; the job runs on the --on hosts, "
            "this machine or SLURM as given, and `--up GPU` rents on Lambda or Vast")  # fmt: skip


def _accelerators(reader: Reader, loc: Path_, value: Any) -> str:
    value = _label(value) if isinstance(value, Mapping) else value
    if not isinstance(value, str) or "," in value or "+" in value:
        raise reader.refuse(loc, "gpujob rents one GPU type, named", "keep one, e.g. `A100:8`")
    return value


def _size(reader: Reader, loc: Path_, value: Any) -> float:
    """`8`, `"8+"` (at least: gpujob's own fields are minimums too), `"64GB"`."""
    match = SIZE.match(str(value).strip())
    if not match:
        raise reader.refuse(loc, f"cannot read {value!r} as a size", "write a number, e.g. 8")
    number = float(match.group("n"))
    return number * 1024 if (match.group("unit") or "").upper().startswith("T") else number


def _autostop(reader: Reader, loc: Path_, value: Any) -> dict[str, Any]:
    """SkyPilot's forms (`true` = 5 minutes, minutes, `10h`, a mapping); its default is to
    stop, not tear down (`down: false`), which Lambda cannot: there it terminates."""
    if value is True:
        return {"idle_minutes": 5, "down": False}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"idle_minutes": value, "down": False}
    if isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            seconds = parse_duration(text if text[-1].isalpha() else f"{text}m")
        except ValueError:
            seconds = None
        if seconds is not None:
            return {"idle_minutes": seconds / 60, "down": False}
    if isinstance(value, Mapping):
        for key in value:
            with reader.collect():
                reader.known((*loc, str(key)), AUTOSTOP_KEYS, ())
                if key in ("hook", "hook_timeout"):
                    raise reader.refuse((*loc, str(key)), "gpujob's host watcher runs no hook "
                                        "before it ends the host", "remove it")  # fmt: skip
        wait_for = value.get("wait_for", AUTOSTOP_WAIT)
        if wait_for != AUTOSTOP_WAIT:
            raise reader.refuse(
                (*loc, "wait_for"),
                f"gpujob's host watcher counts a host idle only with no job and no SSH session "
                f"(SkyPilot's `{AUTOSTOP_WAIT}`), so `{wait_for}` would end it later than "
                "written",
                f"remove it, or write `wait_for: {AUTOSTOP_WAIT}`",
            )
        kept = {k: v for k, v in value.items() if k in ("idle_minutes", "down")}
        return {"down": False, **kept}
    raise reader.refuse(loc, f"cannot read {value!r}", "write minutes, `10h`, or a mapping")
