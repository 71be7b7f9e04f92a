"""The job's merge step (`merge:`): on node 0, once the run has succeeded, the adapter's own
adapter_config.json is checked (agent/merge_check.py, standard library) and only then loaded
and merged into its base with peft, in the job's environment. Both run from the workdir:
`merge.adapter` and `merge.into` are relative to the spec's folder like the workdir itself,
so `work/out/lora` with `workdir: work` is `out/lora` there; `merge.base` is a model name or
a path on the host as the run names it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from launcher.agent import merge_check
from launcher.plan.model import CopyFile, Step, WriteFile
from launcher.spec.job import JobSpec

CHECK_FILE = "merge_check.py"
MERGE_FILE = "merge.py"
MERGE = """\
import json, sys
from pathlib import Path

adapter, base, into = sys.argv[1:4]
base = base or json.loads((Path(adapter) / "adapter_config.json").read_text())[
    "base_model_name_or_path"]
print(f"[gpujob] merge: {adapter} into {base} -> {into}", flush=True)
import peft, transformers
from packaging.version import Version

kind = json.loads((Path(adapter) / "adapter_config.json").read_text()).get("task_type")
auto = transformers.AutoModelForCausalLM if kind in (None, "CAUSAL_LM") else transformers.AutoModel
dtype = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
model = auto.from_pretrained(base, **{dtype: "auto"})
merged = peft.PeftModel.from_pretrained(model, adapter).merge_and_unload()
merged.save_pretrained(into, safe_serialization=True)
for source in (adapter, base):
    try:
        transformers.AutoTokenizer.from_pretrained(source).save_pretrained(into)
        break
    except Exception:  # no tokenizer there: the merged weights are what matters
        continue
print(f"[gpujob] merge: merged model saved: {into}", flush=True)
"""


@dataclass(frozen=True)
class MergeStep:
    """What run.sh runs after the program on node 0 (each a list of argv groups)."""

    check: list[list[str]]
    merge: list[list[str]]


def merge_files(spec: JobSpec, node_dir: str, rank: int) -> list[Step]:
    if spec.merge is None or rank != 0:
        return []
    return [
        CopyFile(source=str(Path(merge_check.__file__)), path=f"{node_dir}/{CHECK_FILE}"),
        WriteFile(path=f"{node_dir}/{MERGE_FILE}", content=MERGE),
    ]


def merge_step(spec: JobSpec, python: str, node_dir: str, rank: int) -> MergeStep | None:
    merge = spec.merge
    if merge is None or rank != 0:
        return None
    base = merge.base or ""
    workdir = spec.workdir or "."  # None: nothing shipped, the job's workdir starts empty
    adapter = on_host(merge.adapter, workdir)
    into = on_host(merge.into, workdir) if merge.into else f"{adapter}-merged"
    return MergeStep(
        check=[[python, f"{node_dir}/{CHECK_FILE}", adapter, base]],
        merge=[[python, f"{node_dir}/{MERGE_FILE}", adapter, base, into]],
    )


def on_host(path: str, workdir: str) -> str:
    """A path of the spec (relative to its folder, as the workdir is) as the run sees it on
    the host, from inside the workdir; an absolute one is the host's own. (storage's merge
    guard refuses one outside the workdir before this is planned.)"""
    if posixpath.isabs(path) or posixpath.isabs(workdir):
        return path
    return posixpath.relpath(posixpath.normpath(path), posixpath.normpath(workdir))
