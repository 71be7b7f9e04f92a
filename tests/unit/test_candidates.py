"""Candidate resources (`any_of`, `ordered`, accelerator lists): which one `submit --up`
alone rents. The choice itself is pure (`pick`, table-driven); the whole path runs through
the real CLI against the Lambda and Vast fakes, each on a thread, with `--dry-run`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clouds import point_at

from infra.fakes import serve_lambda, serve_vast
from infra.fakes.null_backend import NullBackend
from launcher.errors import GpujobError
from launcher.spec.candidates import Candidate, Candidates
from launcher.targets.cloud.candidates import Quote, pick

L4, A100, A10G = "L4:1", "A100:1", "A10G:1"


def candidates(choose: str, *labels: str) -> Candidates:
    return Candidates(choose=choose, of=[Candidate(accelerators=label) for label in labels])


QUOTES = [
    [Quote("lambda", why="sells no l4"), Quote("vast", 0.40)],
    [Quote("lambda", 1.29), Quote("vast", 1.10)],
    [Quote("", why="neither sells a10g")],
]


@pytest.mark.parametrize("choose, labels, quotes, taken, cloud, why", [
    ("cheapest", (L4, A100, A10G), QUOTES, L4, "vast", "the cheapest offer"),
    ("cheapest", (A100, L4), [QUOTES[1], [Quote("vast", 2.0)]], A100, "vast", "the cheapest"),
    ("in_order", (A10G, A100, L4), [QUOTES[2], QUOTES[1], QUOTES[0]], A100, "vast",
     "the first candidate in order that a cloud offers"),
    ("in_order", (L4, A100), QUOTES[:2], L4, "vast", "the first candidate in order"),
])  # fmt: skip
def test_the_candidate_taken_and_why(
    choose: str, labels: tuple[str, ...], quotes: list[list[Quote]], taken: str, cloud: str,
    why: str,
) -> None:  # fmt: skip
    choice = pick("task.yaml:3: candidates", candidates(choose, *labels), quotes)
    assert (choice.label, choice.cloud) == (taken, cloud)
    assert choice.line.startswith(f"task.yaml:3: candidates: renting {taken} on {cloud} at $")
    assert why in choice.line


def test_none_servable_is_one_line_with_each_candidates_reasons() -> None:
    quotes = [[Quote("lambda", why="sells no l4"), Quote("vast", why="no offer under $0.10/h")],
              [Quote("", why="neither sells a10g")]]  # fmt: skip
    with pytest.raises(GpujobError) as raised:
        pick("task.yaml:3: candidates L4:1, A10G:1", candidates("cheapest", L4, A10G), quotes)
    (line,) = raised.value.lines()
    assert line.startswith("task.yaml:3: candidates L4:1, A10G:1: no candidate can be rented (")
    assert ("L4:1: lambda: sells no l4, vast: no offer under $0.10/h; A10G:1: neither sells "
            "a10g); nothing was rented") in line  # fmt: skip


@pytest.fixture
def clouds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path) -> Iterator[None]:
    lam, vast = serve_lambda(NullBackend()), serve_vast(NullBackend())
    point_at(monkeypatch, tmp_path, lam=lam, vast=vast)
    yield
    lam.stop()
    vast.stop()


def task(tmp_path: Path, resources: str) -> str:
    path = tmp_path / "task.yaml"
    path.write_text(f"resources:\n{resources}run: echo $SKYPILOT_NUM_GPUS_PER_NODE\n")
    return str(path)


@pytest.mark.parametrize("resources, flags, said", [
    ("  any_of:\n    - accelerators: A100:1\n    - accelerators: L4:1\n"
     "    - accelerators: A10G:1\n", (),
     "renting L4:1 on vast at $0.2"),
    ("  ordered:\n    - accelerators: A10G:1\n    - accelerators: A100:1\n"
     "    - accelerators: L4:1\n", (),
     "renting A100:1 on vast at $1.1"),
    ("  accelerators: [A10G:1, A100:1, L4:1]\n", ("--provider", "lambda"),
     "renting A100:1 on lambda at $1.29/h per host, the first candidate in order"),
])  # fmt: skip
def test_submit_up_alone_rents_the_chosen_candidate(
    tmp_path: Path, gpujob: Callable, clouds: None, resources: str, flags: tuple[str, ...],
    said: str,
) -> None:  # fmt: skip
    result = gpujob("submit", task(tmp_path, resources), "--up", *flags, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert said in result.stderr
    assert "A10G:1: lambda: sells no a10g, vast: sells no a10g" in result.stderr or flags
    label = said.split()[1]
    assert f"gpujob takes {label}, the candidate of `--up {label}`" in result.stderr


def test_submit_up_alone_with_no_candidate_servable(
    tmp_path: Path, gpujob: Callable, clouds: None
) -> None:
    resources = "  any_of:\n    - accelerators: A10G:1\n    - accelerators: A100:1\n"
    resources += "  max_hourly_cost: 0.2\n"
    result = gpujob("submit", task(tmp_path, resources), "--up", "--dry-run")
    assert result.exit_code == 1
    (line,) = [x for x in result.stderr.splitlines() if "error" in x]
    assert "no candidate can be rented (A10G:1: lambda: sells no a10g" in line
    assert "A100:1: lambda: no offer for a100:1 under $0.20/h" in line


def gpujob_spec(tmp_path: Path, resources: str) -> Path:
    """A gpujob spec (not a SkyPilot task) with these `resources:` lines."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: n\nimage: host\nresources:\n{resources}run:\n  entrypoint: train.py\n")
    return spec


def test_a_gpujob_spec_with_candidates_is_planned_for_the_one_rented(
    tmp_path: Path, gpujob: Callable, clouds: None
) -> None:
    spec = gpujob_spec(tmp_path, "  candidates:\n    choose: cheapest\n    of:\n"
                       "      - accelerators: A100:8\n      - accelerators: L4:1\n")  # fmt: skip
    here = gpujob("submit", str(spec), "--dry-run")
    assert "the job is planned for A100:8; nothing is rented here" in here.stderr
    assert "SKYPILOT_NUM_GPUS_PER_NODE=8" in here.stdout.replace("export ", "")
    rented = gpujob("submit", str(spec), "--up", "--dry-run")
    assert rented.exit_code == 0, rented.stderr
    assert "renting L4:1 on vast at $0.28/h per host, the cheapest offer" in rented.stderr
    assert "SKYPILOT_NUM_GPUS_PER_NODE=1" in rented.stdout.replace("export ", "")


def test_up_alone_before_the_job_file_takes_the_file_as_the_spec(
    tmp_path: Path, gpujob: Callable, clouds: None
) -> None:
    spec = gpujob_spec(tmp_path, "  accelerators: L4:1\n")
    before = gpujob("submit", "--up", str(spec), "--dry-run", "--job-id", "j1")
    after = gpujob("submit", str(spec), "--up", "--dry-run", "--job-id", "j1")
    assert before.exit_code == 0, before.stderr
    assert "renting L4:1 on vast" in before.stderr
    assert before.stdout == after.stdout and before.stderr == after.stderr
    named = gpujob("submit", "--up", "a100", str(spec), "--dry-run")  # a GPU stays a GPU
    assert named.exit_code == 0, named.stderr
    assert "L4" not in named.stderr.split("renting", 1)[-1].split("\n", 1)[0]
