"""Seed 002: a LoRA adapter trained on a 4-bit base and then merged gave a corrupted model.

Before a job that merges an adapter starts, refuse a merge into a quantized base
(bitsandbytes 4/8-bit, GPTQ, AWQ) and name the full-precision one instead; an adapter
trained on a quantized base merges only into its 16-bit sibling (merge_check.siblings). An
adapter already here is judged as the host judges it before the merge
(agent/merge_check.refusal: its own `adapter_config.json`, base and quantization, and
`merge.base`), so submit never passes what the host refuses; one the job will write is
judged by `merge.base`'s name now, and by its config on the host.
"""

from __future__ import annotations

from pathlib import Path

from launcher.agent.merge_check import fixes, quantization_of, refusal
from launcher.errors import UsageError
from launcher.spec.load import LoadedSpec


def check_merge(loaded: LoadedSpec) -> None:
    merge = loaded.spec.merge
    if merge is None:
        return
    adapter = (loaded.path.parent / merge.adapter).resolve()
    _inside_the_workdir(loaded)
    if not adapter.exists():
        _check_base_by_name(loaded, adapter)
        return
    why = refusal(adapter, merge.base or "", loaded.path.parent)
    if why:
        raise UsageError(f"{loaded.where('merge', 'adapter')}: merge.adapter: {why}")


def _check_base_by_name(loaded: LoadedSpec, adapter: Path) -> None:
    """An adapter the job will write: its base must be named, and a quantized name is
    refused before anything runs (the host checks the adapter's own config again)."""
    merge = loaded.spec.merge
    assert merge is not None
    if not merge.base:
        raise UsageError(
            f"{loaded.where('merge', 'adapter')}: merge.adapter: {adapter} is not here, so the "
            "job will write it; name the model it merges into with merge.base (checked now by "
            "name, and against the adapter's adapter_config.json on the host before the merge)"
        )
    quant = quantization_of(merge.base, loaded.path.parent)
    if quant:
        raise UsageError(
            f"{loaded.where('merge', 'base')}: merge.base: {merge.base} is a quantized base "
            f"({quant}); merging the adapter {merge.adapter} into it gives a corrupted model "
            f"(4-bit rounding, seed 002): {fixes(merge.base)}"
        )


def _inside_the_workdir(loaded: LoadedSpec) -> None:
    """The merge runs on the host from the workdir, so a relative adapter (and its merged
    copy) must lie inside it; an absolute one is a path of the host."""
    merge, workdir = loaded.spec.merge, loaded.spec.workdir or "."  # None: the job's is empty
    assert merge is not None
    for name, value in (("adapter", merge.adapter), ("into", merge.into)):
        if value is None or Path(value).is_absolute():
            continue
        if Path(workdir).is_absolute():
            raise UsageError(
                f"{loaded.where('merge', name)}: merge.{name}: {value} is relative to the spec, "
                f"but the workdir {workdir} is absolute",
                f"give merge.{name} as the absolute path the job writes on the host",
            )
        inside = (loaded.path.parent / value).resolve()
        if not inside.is_relative_to(loaded.workdir or loaded.path.parent.resolve()):
            raise UsageError(
                f"{loaded.where('merge', name)}: merge.{name}: {value} is outside the workdir "
                f"{workdir} (both are relative to the spec); the merge runs on the host inside "
                f"the workdir",
                f"write it as {workdir.rstrip('/')}/{value} if the job writes it there, or give "
                "the host's absolute path",
            )
