"""Eval figures per checkpoint: what a job's `on_checkpoint` hook wrote (seed 000's eval
`metrics.csv`) inside a checkpoint's folder (`checkpoint-30/metrics.csv`) or in the declared
`checkpoints.outputs` folder, as `metrics.csv`, `metrics.json` or `metrics.jsonl`. Read from
node 0's folder while its host answers (one command there, bounded), else from the run's
folder in the bucket, where the agent copied them (agent/ckpt_logs.py HookOutputs).

The step of a row is its `step` column (or `global_step`, `checkpoint`...), else the number
in the name of the folder holding the file (`checkpoint-30`, `step_30`). A CSV is wide (a
column per figure, a text column labels its row: `gsm8k/accuracy`) or long (`metric,value`).
Rows that cannot be read (cut short, no step, no number) are skipped, with one note per file.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from launcher.agent.ckpt_store import step_of
from launcher.errors import GpujobError
from launcher.state.db import JobRecord

NAMES = ("metrics.csv", "metrics.json", "metrics.jsonl")
FILE_CAP = 256 * 1024
"""Bytes read of one file: past it the file is cut at its last whole line (and said)."""
MAX_FILES = 400
STEP_COLUMNS = ("step", "global_step", "checkpoint_step", "ckpt_step", "checkpoint", "ckpt",
                "iteration")  # fmt: skip
DIRECTORY_NOT_FOUND = 3
"""rclone's exit code for a folder that is not there."""
NAME_COLUMNS = ("metric", "name", "key")

# Run on node 0's host by its agent's Python: the files under the checkpoint and outputs
# folders named in job.json, each cut at FILE_CAP, as one JSON object on stdout (null where
# the node's folder is gone).
HOST_SCRIPT = r"""
import json, os, sys
node_dir, cap, most, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
try:
    care = json.load(open(os.path.join(node_dir, "job.json"))).get("checkpoints") or {}
except (OSError, ValueError):
    print("null")  # the folder is gone: the bucket may have them
    sys.exit(0)
found = {}
for kind, root in (("ckpt", care.get("dir")), ("outputs", care.get("outputs"))):
    if not root or not os.path.isdir(root):
        continue
    for top, dirs, files in os.walk(root):
        if top[len(root):].count(os.sep) >= 2:
            dirs[:] = []
        for name in sorted(set(files) & set(names)):
            path = os.path.join(top, name)
            if len(found) < most:
                with open(path, "rb") as handle:
                    data = handle.read(cap + 1)
                rel = kind + "/" + os.path.relpath(path, root)
                found[rel] = [data[:cap].decode("utf-8", "replace"), len(data) > cap]
print(json.dumps(found))
"""


@dataclass
class Evals:
    """Each checkpoint's figures by step, where they were read, and what was skipped."""

    source: str
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        return list(dict.fromkeys(k for figures in self.steps.values() for k in figures))

    def series(self, name: str) -> tuple[list[float], list[float]]:
        points = [(float(s), f[name]) for s, f in sorted(self.steps.items()) if name in f]
        return [x for x, _ in points], [y for _, y in points]

    def as_json(self) -> dict[str, object]:
        return {"source": self.source, "notes": self.notes,
                "checkpoints": [{"step": s, "figures": f}
                                for s, f in sorted(self.steps.items())]}  # fmt: skip


def _float(text: object) -> float | None:
    if isinstance(text, bool):
        return None
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def _step(text: object) -> int | None:
    """A step cell: `30`, `30.0`, or a checkpoint's name (`checkpoint-30`)."""
    value = _float(text)
    if value is not None:
        return int(value) if value == int(value) and value >= 0 else None
    return step_of(str(text).strip()) if isinstance(text, str) else None


def folder_step(path: str) -> int | None:
    """The step in the name of the nearest folder holding `path` that has one
    (`checkpoint-30`, `step_30`, `30`)."""
    for part in reversed(PurePosixPath(path).parts[:-1]):
        step = int(part) if part.isdigit() else step_of(part)
        if step is not None:
            return step
    return None


def add_file(evals: Evals, path: str, text: str, cut: bool = False) -> None:
    """One file's rows into `evals`; a note for the rows skipped, and for a file cut short."""
    if cut:  # its last line may be half a row
        text = text[: text.rfind("\n") + 1]
        evals.notes.append(f"{path}: only its first {FILE_CAP // 1024} KiB read")
    default = folder_step(path)
    if path.endswith(".csv"):
        rows, bad = _csv_rows(text, default)
    else:
        rows, bad = _json_rows(text, default, path.endswith(".jsonl"))
    for step, figures in rows:
        evals.steps.setdefault(step, {}).update(figures)
    if bad:
        evals.notes.append(f"{path}: {bad} row(s) skipped (no step, no number, or cut short)")


Rows = list[tuple[int, dict[str, float]]]


def _csv_rows(text: str, default: int | None) -> tuple[Rows, int]:
    lines = list(csv.reader(text.splitlines()))
    lines = [line for line in lines if any(cell.strip() for cell in line)]
    if not lines:
        return [], 0
    header = [cell.strip() for cell in lines[0]]
    if all(_float(cell) is not None for cell in header):  # no header: nothing names a figure
        return [], len(lines)
    lower = [h.lower() for h in header]
    step_at = next((lower.index(c) for c in STEP_COLUMNS if c in lower), None)
    name_at = next((lower.index(c) for c in NAME_COLUMNS if c in lower), None)
    value_at = lower.index("value") if "value" in lower else None
    rows: Rows = []
    bad = 0
    for line in lines[1:]:
        if len(line) != len(header):
            bad += 1
            continue
        step = _step(line[step_at]) if step_at is not None else default
        if name_at is not None and value_at is not None:  # long: metric,value
            value = _float(line[value_at])
            figures = {} if value is None else {line[name_at].strip(): value}
        else:
            label = "/".join(c.strip() for i, c in enumerate(line)
                             if i != step_at and c.strip() and _float(c) is None)  # fmt: skip
            figures = {(f"{label}/{header[i]}" if label else header[i]): v
                       for i, c in enumerate(line) if i != step_at
                       and (v := _float(c)) is not None}  # fmt: skip
        if step is None or not figures:
            bad += 1
            continue
        rows.append((step, figures))
    return rows, bad


def _json_rows(text: str, default: int | None, lines: bool) -> tuple[Rows, int]:
    records: list[object] = []
    bad = 0
    if lines:
        for line in filter(str.strip, text.splitlines()):
            try:
                records.append(json.loads(line))
            except ValueError:
                bad += 1
    else:
        try:
            data = json.loads(text)
        except ValueError:
            return [], 1
        records = data if isinstance(data, list) else [data]
    rows: Rows = []
    for record in records:
        if not isinstance(record, dict):
            bad += 1
            continue
        flat = _flatten(record)
        key = next((k for k in flat if k.lower() in STEP_COLUMNS), None)
        step = _step(flat.pop(key)) if key is not None else default
        figures = {k: v for k, raw in flat.items() if (v := _float(raw)) is not None}
        if step is None or not figures:
            bad += 1
            continue
        rows.append((step, figures))
    return rows, bad


def _flatten(record: dict[str, object], prefix: str = "") -> dict[str, object]:
    """`{"gsm8k": {"acc": 0.9}}` as `{"gsm8k/acc": 0.9}` (nested objects, two levels)."""
    flat: dict[str, object] = {}
    for key, value in record.items():
        if isinstance(value, dict) and not prefix:
            flat.update(_flatten(value, f"{key}/"))
        elif not isinstance(value, dict | list):
            flat[f"{prefix}{key}"] = value
    return flat


def read_evals(job: JobRecord) -> Evals | None:
    """The job's eval figures from node 0's host where it answers, else from the bucket (a job
    with `checkpoints.sync_to`); None where neither has any."""
    found = _from_host(job)
    if found is None and job.logs_to:
        found = _from_bucket(job)
    return found if found is not None and (found.steps or found.notes) else None


def _from_host(job: JobRecord) -> Evals | None:
    from launcher.targets.base import close_all, target_for

    try:
        nodes = target_for(job).nodes(job)
    except GpujobError:
        return None
    try:
        head = nodes[0] if nodes else None
        if head is None:
            return None
        argv = [head.agent_python, "-c", HOST_SCRIPT, head.node_dir, str(FILE_CAP),
                str(MAX_FILES), *NAMES]  # fmt: skip
        done = head.connection.run(argv)
        files = json.loads(done.stdout) if done.ok else None
    except (GpujobError, OSError, EOFError, ValueError):
        return None
    finally:
        close_all([n.connection for n in nodes])
    if not isinstance(files, dict):
        return None  # the folder gone: the bucket may have them
    evals = Evals("host")  # while the host has the folder, it is the truth (none yet: none)
    for path, (text, cut) in sorted(files.items(), key=lambda kv: _order(kv[0])):
        add_file(evals, path, text, cut)
    return evals


def _order(path: str) -> tuple[int, str]:
    return folder_step(path) or 0, path


def run_path(job: JobRecord) -> str:
    """The run's folder in the bucket: the logs are shipped to `<run>/logs/<job>`
    (plan/node_files.py logs_path)."""
    assert job.logs_to
    suffix = f"/logs/{job.id}"
    return job.logs_to[: -len(suffix)] if job.logs_to.endswith(suffix) else job.logs_to


def _from_bucket(job: JobRecord) -> Evals:
    """The metrics files of the run's checkpoints and outputs, copied here in one `rclone
    copy` (files over FILE_CAP left out, and said)."""
    import subprocess
    import tempfile
    from pathlib import Path

    from launcher.agent.ckpt_sync import rclone_env
    from launcher.storage import rclone_config
    from launcher.storage.remotes import credentials
    from launcher.storage.shipped_logs import shipped_remote

    remote = shipped_remote(job)
    env = rclone_env(rclone_config.env_vars(remote, credentials(remote)))
    where = run_path(job)
    includes = [
        arg
        for name in NAMES
        for arg in ("--include", f"/*/{name}", "--include", f"/outputs/**/{name}")
    ]
    evals = Evals(where)
    with tempfile.TemporaryDirectory(prefix="gpujob-evals.") as tmp:
        listed = subprocess.run(["rclone", "lsjson", "-R", "--files-only", *includes, where],
                                env=env, capture_output=True, check=False)  # fmt: skip
        if listed.returncode == DIRECTORY_NOT_FOUND:
            return evals  # nothing pushed there (yet)
        if listed.returncode != 0:  # the record was read: say why the evals were not
            said = listed.stderr.decode(errors="replace").strip().splitlines()
            evals.notes.append(
                f"{where} cannot be listed: {said[-1] if said else listed.returncode}"
            )
            return evals
        entries = json.loads(listed.stdout or b"[]")
        big = [e["Path"] for e in entries if e.get("Size", 0) > FILE_CAP]
        for path in big:
            evals.notes.append(f"{where}/{path}: over {FILE_CAP // 1024} KiB, not read")
        if len(entries) > len(big):
            subprocess.run(["rclone", "copy", "--max-size", f"{FILE_CAP}b", *includes, where,
                            tmp], env=env, capture_output=True, check=False)  # fmt: skip
        got = sorted((p for p in Path(tmp).rglob("*") if p.is_file()),
                     key=lambda p: _order(str(p.relative_to(tmp))))[:MAX_FILES]  # fmt: skip
        for file in got:
            rel = str(file.relative_to(tmp))
            add_file(evals, rel, file.read_bytes()[:FILE_CAP].decode(errors="replace"))
    return evals
