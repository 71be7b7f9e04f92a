"""Shared helpers: run the CLI in-process, the way a user runs it (httpie's tests/utils shape)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RAY_LOCK = Path("/tmp/gpujob-ray.lock")
os.environ.setdefault("GPUJOB_LAMBDA_LAUNCH_INTERVAL_S", "0")
os.environ.setdefault("GPUJOB_VAST_CREATE_INTERVAL_S", "0")
os.environ.setdefault("GPUJOB_VAST_DESTROY_INTERVAL_S", "0")
"""Lambda's 12 s between launches, Vast's 4.5 s between creates and 3 s between destroys
(clouds.spacing) are for
the clouds: the fakes' limiters are off unless a test turns them on, and that test sets the
interval it needs."""


LONGEST_FIRST = (
    "tests/lab/test_recovery.py",  # 420 s
    "tests/e2e/test_lifecycle_local.py",  # 94 s
    "tests/e2e/test_resume.py",  # 83 s
    "tests/e2e/test_local_jobs.py",  # 61 s
    "tests/e2e/test_workloads.py",  # 56 s
    "tests/lab/test_autostop_on_lab.py",  # 282 s
    "tests/lab/test_images.py",  # 252 s on a fresh machine (it builds the image)
    "tests/lab/test_ssh_jobs.py",  # 231 s
    "tests/lab/test_bucket_mounts_on_lab.py",  # 187 s
    "tests/lab/test_ray_on_lab.py",  # 180 s
    "tests/lab/test_rent_interrupts.py",  # 159 s
    "tests/lab/test_remote_jobs.py",  # 149 s
    "tests/lab/test_up_down.py",  # 124 s
    "tests/lab/test_slurm_requeue_on_lab.py",  # 99 s
    "tests/lab/test_slurm_jobs.py",  # 88 s
    "tests/lab/test_recovery_autostop_on_lab.py",  # 71 s
    "tests/storage/test_run_namespaces.py",  # 58 s
)
"""Test files by their time in two `make test` runs at once (2026-11-27, this 2-core machine,
fresh, two workers each). With `pytest -n 2 --dist loadfile --no-loadscope-reorder`
(pytest-xdist) a worker takes a whole file at a time, in this order first, so no long file
starts last while the other idles. The second worker begins with the local e2e files: on a
fresh machine the first worker waits about five minutes for its lab's images to be built, and
the second keeps the CPU busy meanwhile. The other files follow in their usual order, the many
short unit files last, evening out the two workers' ends."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist workers only (`make test`): one process (TEST_WORKERS=0) keeps the order its
    runs were green in (a run with this order in one process had a lab host time out on the
    registry). A worker is told by `workerinput`: xdist clears a worker's `numprocesses`, so
    that option says nothing there (this hook read it, and sorted nothing, until 2026-11-27).
    The controller hands out files in the workers' collection order."""
    if not hasattr(config, "workerinput"):
        return
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture(autouse=True)
def _end_live_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test's gpujob leaves master SSH connections and a resident process for the next
    command, as it does for a user; they end with the test (its state dir is
    `tmp_path/state` by convention)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    state = request.getfixturevalue("tmp_path") / "state"
    yield
    from launcher.remote.openssh import close_state as close

    close(state)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """`small_disk("2m")`: a real tmpfs of that size (a folder of tmp_path, or `at`, made
    if missing), unmounted after the test (root)."""
    assert os.geteuid() == 0, "these tests mount a tmpfs: run them as root"
    mounted: list[Path] = []

    def mount(size: str, at: Path | None = None) -> Path:
        point = at or tmp_path / f"disk-{len(mounted)}"
        point.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                       check=True)  # fmt: skip
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private GPUJOB_STATE_DIR (and cache dir) per test; neither is created up front."""
    monkeypatch.setenv("GPUJOB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUJOB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "state"


@pytest.fixture
def gpujob(
    state_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Result]:
    """`gpujob(*args)` -> Result(exit_code, stdout, stderr). Starting a real job fails the test:
    these tests check plans and errors, never runs."""

    def refuse_to_run(*_: object, **__: object) -> None:
        raise AssertionError("a unit test tried to start a real job")

    monkeypatch.setattr("launcher.runtime.apply.apply_plan", refuse_to_run)

    def run(*args: str) -> Result:
        from launcher.cli import main

        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


@pytest.fixture(scope="session")
def job_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Python the quickstart's jobs run with here (built by a one-step job if absent)."""
    import sys

    from launcher.plan.build import _env_dir
    from launcher.spec.image import load_image_definition
    from launcher.spec.load import load_job_spec
    from launcher.targets.local import local_target

    spec = load_job_spec(REPO / "jobs" / "quickstart.yaml", []).spec
    image = load_image_definition(spec.image, REPO / "jobs")
    python = Path(_env_dir(local_target(spec, image), image)) / "bin" / "python"
    if not python.exists():
        gpujob = str(Path(sys.executable).with_name("gpujob"))
        env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path_factory.mktemp("state")))
        built = subprocess.run([gpujob, "submit", str(REPO / "jobs" / "quickstart.yaml"),
                                "--set", "run.args=[--steps,1]"], env=env, capture_output=True,
                               text=True, timeout=900)  # fmt: skip
        assert python.exists(), built.stderr[-2000:]
    return str(python)


@pytest.fixture(scope="session")
def ray_tmpdir() -> Iterator[Path]:
    """This session's Ray temp dir (RAY_TMPDIR for the jobs it starts), so its Ray never
    reads another's /tmp/ray (`ray_current_cluster`, `session_latest`). Short, under /tmp:
    Ray's unix sockets live beneath it and a socket path stops at 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="gjray-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def one_ray_on_the_machine(ray_tmpdir: Path) -> Iterator[Path]:
    """For a test that starts Ray on this machine or a lab host: waits for the machine's Ray
    lock. A Ray job's run script ends with `ray stop`, which stops every Ray process it can
    see: another test session's, or a lab host container's, that happened to run then. So
    Ray tests of every session take turns; each has its own temp dir and ports besides."""
    with RAY_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield ray_tmpdir
