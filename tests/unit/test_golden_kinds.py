"""Golden dry runs for each kind of target besides this machine (test_dry_run.py has the local
quickstart): an SSH host of hosts.yaml, hosts rented with `--up` from the Lambda fake (served
on loopback: the offers are the fake's), and a SLURM cluster. None is contacted; what a dry
run cannot know shows as a placeholder (`<home>`, `<new lambda host 0>`, `<its ip>`).
`GPUJOB_UPDATE_GOLDEN=1` rewrites them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clouds import point_at
from planning import REPO
from test_dry_run import GOLDEN, fixed_dirs, normalised  # noqa: F401 (fixed_dirs: a fixture)

from infra.fakes import RunningFake, serve_lambda
from infra.fakes.null_backend import NullBackend

HOSTS = """\
hosts:
  - {name: gpu1, address: 192.0.2.10, user: me, port: 2222}
  - {name: hpc, type: slurm, address: login.example, user: me, partition: gpu, account: lab,
     shared: /scratch/me}
"""


@pytest.fixture
def hosts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    monkeypatch.setenv("GPUJOB_HOSTS_FILE", str(path))
    return path


@pytest.fixture
def lambda_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningFake]:
    fake = serve_lambda(NullBackend())
    point_at(monkeypatch, tmp_path, lam=fake)
    yield fake
    fake.stop()


def matches_golden(stdout: str, name: str) -> None:
    """Machine-specific parts out: the checkout, and the hash of its path that names the
    host's lasting copy of the workdir."""
    workdir = str(REPO / "jobs" / "quickstart")
    digest = hashlib.sha256(workdir.encode()).hexdigest()[:10]
    actual = normalised(stdout).replace(digest, "<hash of its path>")
    path = GOLDEN / name
    if os.environ.get("GPUJOB_UPDATE_GOLDEN") == "1":
        path.write_text(actual)
    assert actual == path.read_text(), (
        f"the dry run changed; if that is intended: GPUJOB_UPDATE_GOLDEN=1 pytest {__file__}"
    )


KINDS = {
    "ssh": ["--on", "gpu1"],
    "lambda": ["--up", "a100", "--allow-cpu"],
    "slurm": ["--on", "slurm:hpc"],
}


@pytest.mark.parametrize("flags", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_of_target_has_a_golden_dry_run(
    fixed_dirs: Callable,  # noqa: F811
    hosts_file: Path,
    lambda_fake: RunningFake,
    tmp_path: Path,
    kind: str,
    flags: list[str],
) -> None:
    result = fixed_dirs("submit", "jobs/quickstart.yaml", "--dry-run", *KINDS[kind], *flags,
                        "--job-id", f"{kind}-golden")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert not Path("/state").exists()
    if flags:  # stdout is the JSON alone, whatever the target says beside it
        json.loads(result.stdout)
        matches_golden(result.stdout, f"{kind}-dry-run.json")
    else:  # what the user reads: the plan, then what was said on stderr (the offers, the
        # assumptions of a dry run that contacted nothing)
        matches_golden(f"{result.stdout}\n# on stderr:\n{result.stderr}", f"{kind}-dry-run.txt")
    if kind == "lambda":  # nothing rented: the fake saw offers asked for, no launch
        assert not [r for r in lambda_fake.control.requests() if r["op"] == "launch"]


@pytest.mark.parametrize("on", [["--on", "gpu1"], []], ids=["ssh", "local"])
def test_the_s3_write_probe_is_a_step_of_the_dry_run_with_its_keys_masked(
    fixed_dirs: Callable,  # noqa: F811
    hosts_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    on: list[str],
) -> None:
    """What `submit` checks before any file reaches a host is printed, one line each: where
    it runs and what; the remote's keys by name on its stdin, their values never."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.yaml").write_text(
        "remotes:\n  t: {provider: Other, endpoint: 'http://127.0.0.1:9', bucket: ckpts,"
        " access_key_env: T_KEY, secret_key_env: T_SECRET}\n"
    )
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(config))
    monkeypatch.setenv("T_KEY", "key-id-value")
    monkeypatch.setenv("T_SECRET", "sekret-value")
    sets = ["--set", "checkpoints.sync_to=t:runs/q"]
    text = fixed_dirs("submit", "jobs/quickstart.yaml", "--dry-run", *on, *sets, "--job-id", "p")
    data = fixed_dirs("submit", "jobs/quickstart.yaml", "--dry-run", "--json", *on, *sets,
                      "--job-id", "p")  # fmt: skip
    assert (text.exit_code, data.exit_code) == (0, 0), text.stderr + data.stderr
    for shown in (text.stdout, data.stdout):
        assert "sekret-value" not in shown and "key-id-value" not in shown
    probes = {probe["check"]: probe for probe in json.loads(data.stdout)["probes"]}
    lines = text.stdout.split("checked first, before any file reaches a host:\n")[1]
    if on:
        assert list(probes) == ["free disk", "S3 write probe", "run folder"]
        s3 = probes["S3 write probe"]
        assert s3["argv"][-2:] == ["gpujob_t:ckpts", "gpujob_t:ckpts/runs/q"]
        keys = {"RCLONE_CONFIG_GPUJOB_T_ACCESS_KEY_ID", "RCLONE_CONFIG_GPUJOB_T_SECRET_ACCESS_KEY"}
        assert keys <= set(s3["stdin"])  # by name, on its stdin
        where = "gpujob_t:ckpts gpujob_t:ckpts/runs/q"
        assert f"  S3 write probe on gpu1: python3 -c <S3 write probe> {where}  #" in lines
        assert "RCLONE_CONFIG_GPUJOB_T_SECRET_ACCESS_KEY=***" in lines
    else:
        assert list(probes) == ["S3 write probe", "run folder"]
        assert probes["S3 write probe"]["host"] == "this machine"
        assert lines.startswith("  S3 write probe on this machine: (boto3)  # list t:runs/q's")


@pytest.mark.parametrize(
    ("argv", "shown"),
    [(["python3", "-c", "x", "/a", ""], "python3 -c x /a ''"), (["echo", "a b"], "echo 'a b'")],
)
def test_the_dry_run_shows_every_word_an_empty_one_too(argv: list[str], shown: str) -> None:
    """A free-disk read with no environment folder passes '' : the shell's words, all of them."""
    from launcher.plan.show import shell_join

    assert shell_join(argv) == shown


@pytest.mark.parametrize(("kind", "pulls"), [("ssh", True), ("lambda", False)])
def test_a_rented_host_is_planned_with_the_image_its_bootstrap_pulled(
    fixed_dirs: Callable,  # noqa: F811
    hosts_file: Path,
    lambda_fake: RunningFake,
    kind: str,
    pulls: bool,
) -> None:
    """`up` pulls the job's image while it makes a rented host ready, so the plan that runs
    there has no pull: neither has its dry run. A host of yours may lack it: a pull."""
    result = fixed_dirs("submit", "jobs/quickstart.yaml", "--dry-run", "--json", *KINDS[kind],
                        "--set", "image=registry.example/job:1", "--job-id", "img")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    steps = json.loads(result.stdout)["nodes"][0]["steps"]
    pull = [s for s in steps if s["kind"] == "run" and any("docker pull" in w for w in s["argv"])]
    assert bool(pull) == pulls, steps
    assert ("the image pulled when the host is made ready" in result.stderr) == (not pulls)
