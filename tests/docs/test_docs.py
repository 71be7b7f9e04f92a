"""The documentation says what the code does: the generated reference pages match the code,
every YAML example in docs/ and the README is valid (a job spec against `gpujob schema`'s
JSON Schema, an image definition against its model), and the shell examples marked
`<!-- test: run -->` run here as written, in an empty folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "docs"))
import gen_reference

PAGES = sorted([*(REPO / "docs").rglob("*.md"), REPO / "README.md"])
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
MARKED = re.compile(r"<!-- test: run -->\n```(?:bash|sh)\n(.*?)^```", re.M | re.S)
BASE_SPEC = {"name": "doc", "image": "host", "run": {"entrypoint": "train.py"}}
"""What a fragment (`checkpoints: {...}` alone) is completed with before it is checked."""
NOT_SPECS = {"hosts"}
"""Top-level keys of YAML examples that are not job specs (hosts.yaml)."""


def blocks(kind: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            if match.group(1) == kind:
                line = text[: match.start()].count("\n") + 1
                found.append((f"{page.relative_to(REPO)}:{line}", match.group(2)))
    return found


@pytest.mark.parametrize("name", sorted(gen_reference.PAGES))
def test_the_generated_reference_pages_match_the_code(name: str) -> None:
    page = REPO / "docs" / "reference" / name
    assert page.read_text() == gen_reference.PAGES[name](), (
        f"{page} is stale: run `python docs/gen_reference.py`"
    )


YAML_BLOCKS = blocks("yaml")


def test_the_docs_have_yaml_examples() -> None:
    assert len(YAML_BLOCKS) >= 5


def as_editors_read(data: object) -> object:
    """`on:` is the key `on` to an editor's YAML 1.2 (what the schema is for), `True` to
    PyYAML's 1.1; gpujob reads it as `on` (spec/notify.py)."""
    if isinstance(data, dict):
        return {("on" if k is True else k): as_editors_read(v) for k, v in data.items()}
    if isinstance(data, list):
        return [as_editors_read(item) for item in data]
    return data


@pytest.mark.parametrize(("where", "text"), YAML_BLOCKS, ids=[w for w, _ in YAML_BLOCKS])
def test_every_yaml_example_is_valid(where: str, text: str) -> None:
    data = as_editors_read(yaml.safe_load(text))
    assert isinstance(data, dict), where
    if NOT_SPECS & data.keys():
        return
    if {"base", "torch"} <= data.keys():
        from launcher.spec.image import ImageDefinition

        ImageDefinition.model_validate(data)
        return
    from launcher.spec.job import JobSpec

    schema = JobSpec.model_json_schema()
    spec = data if "name" in data else {**BASE_SPEC, **data}
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(spec), key=str)
    assert not errors, f"{where}: {errors[0].json_path}: {errors[0].message}"
    JobSpec.model_validate(spec)  # the rules the schema cannot say (batch arithmetic, ...)


RUNNABLE = [(where, line) for where, text in [
    (f"{p.relative_to(REPO)}", m.group(1)) for p in PAGES for m in MARKED.finditer(p.read_text())
] for line in text.splitlines() if line.strip()]  # fmt: skip


def test_the_docs_mark_shell_examples_to_run() -> None:
    assert any("gpujob init quickstart" in line for _, line in RUNNABLE)


def test_the_marked_shell_examples_run_in_an_empty_folder(tmp_path: Path) -> None:
    """In order, in one folder (an example may use the files an earlier one wrote), with the
    gpujob of this checkout."""
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / ".state"), PYTHONPATH=str(REPO),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # fmt: skip
    here = tmp_path / "work"
    here.mkdir()
    for where, line in RUNNABLE:
        done = subprocess.run(shlex.split(line), cwd=here, env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, f"{where}: `{line}` exited {done.returncode}: {done.stderr}"
        assert "Traceback" not in done.stderr, f"{where}: `{line}`: {done.stderr}"


def test_the_readme_keeps_the_two_commands_first_and_stays_short() -> None:
    text = (REPO / "README.md").read_text()
    commands = [line for line in text.splitlines() if line.startswith("    make ")]
    assert commands[:2] == ["    make run", "    make test"]
    assert len(text.splitlines()) < 150
    assert json.dumps(text)  # plain text


@pytest.mark.parametrize("spec", sorted((REPO / "jobs").glob("*.yaml")), ids=lambda p: p.name)
def test_the_schema_an_editor_reads_accepts_every_example_job(spec: Path) -> None:
    """`gpujob schema` is what editors check specs against: it must take every shipped one
    (a shell block `run: |` included)."""
    from launcher.spec.job import JobSpec

    data = yaml.safe_load(spec.read_text())
    validator = jsonschema.Draft202012Validator(JobSpec.model_json_schema())
    errors = sorted(validator.iter_errors(data), key=str)
    assert not errors, f"{spec.name}: {errors[0].json_path}: {errors[0].message}"
