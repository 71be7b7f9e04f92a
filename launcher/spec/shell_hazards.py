"""The hazards gpujob exists to catch, where a SkyPilot user writes them: in `run:`/`setup:`
and the envs they read, not only in gpujob's own `batch:` and `merge:` fields.

- The batch arithmetic: a global batch and a micro batch in the conventional envs
  (GLOBAL_BATCH_SIZE / MICRO_BATCH_SIZE, ...) that the script reads, which the world size
  gpujob plans (nodes x processes per node) times the micro batch does not divide: bash's
  `$(( 32 / (1 * 6) ))` trains on 30 per step, silently. Refused only when a `$(( ))` of the
  script divides with both names and a world size (that silent truncation); otherwise a
  warning: Megatron divides by its data-parallel size, a device_map job is one process.
- The merge guard (seed 002): a command that merges an adapter (merge_and_unload, a
  merge_lora script, ...) with a quantized base (`*-bnb-4bit`, GPTQ, AWQ): its --base /
  --base_model argument, else a model named on that same command (continued lines joined; envs
  expanded), judged by the same rule as `merge:` (agent/merge_check.py). Training on a
  4-bit base and merging into its 16-bit one is not refused.

Each refusal is one line naming the file's line, with the numbers or the fix; `checks: {batch: off}`
or `checks: {merge: off}` silences it where gpujob is wrong. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pydantic import Field

from launcher.agent.merge_check import fixes, quantization_of
from launcher.spec.batch import batch_refusal
from launcher.spec.limits import StrictModel

if TYPE_CHECKING:
    from launcher.spec.load import LoadedSpec

GLOBAL_NAMES = ("GLOBAL_BATCH_SIZE", "GLOBAL_BATCH", "TOTAL_BATCH_SIZE", "GBS")
MICRO_NAMES = (
    "MICRO_BATCH_SIZE", "MICRO_BATCH", "MBS", "PER_DEVICE_BATCH_SIZE",
    "PER_DEVICE_TRAIN_BATCH_SIZE", "BATCH_SIZE_PER_GPU", "BATCH_SIZE_PER_DEVICE",
)  # fmt: skip
MERGING = re.compile(
    r"(?i)merge_and_unload|merge[-_]?lora|merge[-_]?adapter|merge[-_]?peft"
    r"|export[-_]?merged|--merge\b|merged_16bit|save_pretrained_merged"
)
MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9]")
ENV_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
BASE_ARG = re.compile(r"--base(?:[-_]model(?:[-_]name(?:[-_]or[-_]path)?)?)?[= ]+['\"]?([^\s'\"]+)")
WORLD = re.compile(r"WORLD|NUM_NODES|NNODES|GPUS|NPROC|NUM_PROC")


class ChecksSpec(StrictModel):
    batch: bool = Field(default=True, description="`off`: no batch arithmetic check of the envs.")
    merge: bool = Field(default=True, description="`off`: no merge guard on `run:`/`setup:`.")


def shell_hazards(
    scripts: Mapping[str, str],
    envs: Mapping[str, str],
    world_size: int,
    checks: ChecksSpec,
    where: Callable[..., str],
) -> tuple[list[str], list[str]]:
    """Refusals and warnings, one line each; `scripts`: `run`/`setup` text by field,
    `where(*loc)` its line."""
    text = "\n".join(scripts.values())
    refusals: list[str] = []
    warnings: list[str] = []
    if checks.batch:
        (refusals if _divides(text) else warnings).extend(_batch(text, envs, world_size, where))
    if checks.merge:
        refusals += _merge(scripts, envs, where)
    return refusals, warnings


def _divides(text: str) -> bool:
    """A `$(( ))` dividing a global batch by a micro batch and a world size: bash truncates."""
    for line in text.splitlines():
        arith = line[line.index("$((") :] if "$((" in line else ""
        names = [
            any(re.search(rf"\b{n}\b", arith) for n in ns) for ns in (GLOBAL_NAMES, MICRO_NAMES)
        ]
        if "/" in arith and all(names) and WORLD.search(arith):
            return True
    return False


def _batch(text: str, envs: Mapping[str, str], world: int, where: Callable[..., str]) -> list[str]:
    found = [_read(names, text, envs) for names in (GLOBAL_NAMES, MICRO_NAMES)]
    if not all(found):
        return []
    (global_name, global_batch), (micro_name, micro) = found  # type: ignore[misc]
    if global_batch % (world * micro) == 0:
        return []
    why = batch_refusal(global_batch, world, micro, f"envs.{micro_name}", global_name)
    return [f"{where('envs', global_name)}: envs.{global_name}: {why}; or `checks: "
            "{batch: off}` where the script does its own arithmetic"]  # fmt: skip


def _read(names: tuple[str, ...], text: str, envs: Mapping[str, str]) -> tuple[str, int] | None:
    """The first of `names` set to a whole number in `envs` and read by the script."""
    for name in names:
        value = str(envs.get(name, "")).strip()
        if value.isdigit() and int(value) > 0 and re.search(rf"\b{name}\b", text):
            return name, int(value)
    return None


def _merge(
    scripts: Mapping[str, str], envs: Mapping[str, str], where: Callable[..., str]
) -> list[str]:
    for field, script in scripts.items():
        for command in script.replace("\\\n", " ").splitlines():
            if not MERGING.search(command):
                continue
            expanded = ENV_REF.sub(lambda m: str(envs.get(m.group(1), m.group(0))), command)
            named = BASE_ARG.findall(expanded) or MODEL_ID.findall(expanded)
            line = _quantized(field, named, where)
            if line:
                return [line]
    return []


def _quantized(field: str, models: list[str], where: Callable[..., str]) -> str | None:
    for model in dict.fromkeys(models):
        quant = quantization_of(model)
        if quant:
            return (f"{where(field)}: {field}: merges an adapter with the quantized base "
                    f"{model} ({quant}), which gives a corrupted model (4-bit rounding, "
                    f"seed 002): {fixes(model)}; or `checks: {{merge: off}}` if the "
                    "script merges elsewhere")  # fmt: skip
    return None


def script_hazards(loaded: LoadedSpec) -> tuple[list[str], list[str]]:
    """A loaded spec's hazards (either kind of file), its shell `run:` and `setup:`:
    refusals and warnings."""
    spec = loaded.spec
    scripts = {name: text for name, text in (("setup", spec.setup), ("run", spec.run.shell))
               if text}  # fmt: skip
    envs = {name: str(value) for name, value in spec.envs.items()}
    # a shell block starts one process per node, and the ranks it starts (torchrun, ...) are
    # one per GPU: the WORLD_SIZE such a script computes from SKYPILOT_NUM_GPUS_PER_NODE
    world = spec.nodes * max(spec.resources.gpus_per_node, 1) if spec.run.shell else spec.world_size
    return shell_hazards(scripts, envs, world, spec.checks, loaded.where)
