"""The dry run is the run: for each kind of target, `submit --dry-run --json` and then the real
submit of the same job (same `--job-id`), with the executor noting each step it sends
(`GPUJOB_TRACE_STEPS`, runtime/trace.py). The steps that ran equal the steps printed, in the
order printed, but for the values a dry run cannot know by design and shows as placeholders,
each mapped here to what the run found:

- `<home>`: the login's home folder on a host the dry run does not contact (SSH, rented);
- whether the host lets a container lift RLIMIT_MEMLOCK: assumed (as a cloud VM does) and said
  so; a lab host, a network namespace, cannot, and the run leaves `--ulimit memlock=-1` out;
- `<new lambda host 0>` and `<its ip>`: the name and address of a host not yet rented (the
  address placeholder quoted in a script, `'<its ip>'`, where an address needs no quotes).

One tiny job each; the local one needs no lab, the others a lab host, the Lambda fake, the
SLURM cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_slurm_jobs import cluster_files  # noqa: F401 (the cluster's hosts.yaml, per module)
from test_ssh_jobs import ssh_host  # noqa: F401 (a lab host with sshd, per session)

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
IMAGE = str(REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml")
TRACE = "GPUJOB_TRACE_STEPS"


def gpujob(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True, timeout=600)


def tiny_job(folder: Path, image: str = IMAGE) -> Path:
    (folder / "work").mkdir(parents=True, exist_ok=True)
    (folder / "work" / "prog.py").write_text("print('hello from the job', flush=True)\n")
    spec = folder / "job.yaml"
    spec.write_text(f"name: same\nimage: {image}\nworkdir: work\nrun:\n  entrypoint: prog.py\n"
                    "  nproc_per_node: 1\n")  # fmt: skip
    return spec


def dry_then_run(env: dict[str, str], tmp_path: Path, *args: str) -> tuple[Any, list[Any]]:
    """The printed object (`--dry-run --json`) and the steps the real submit then sent."""
    printed = gpujob(env, "submit", *args, "--dry-run", "--json", "--job-id", "same-1")
    assert printed.returncode == 0, printed.stderr
    trace = tmp_path / "trace.jsonl"
    ran = gpujob({**env, TRACE: str(trace)}, "submit", *args, "--job-id", "same-1")
    assert ran.returncode == 0, ran.stderr + ran.stdout
    lines = trace.read_text().splitlines()
    return json.loads(printed.stdout), [json.loads(line) for line in lines]


def printed_steps(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The Submission's steps in the order submit carries them out: the probes (checked
    first, before any file reaches a host), each node's batch; for a job of several nodes,
    the checks and then the starts after them."""

    def at(node: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
        return {"host": node["host"], "node": node["rank"], "step": step}

    steps = [{"host": probe["host"], "node": None, "step": probe} for probe in plan["probes"]]
    if plan["starts_in_batch"]:
        return steps + [at(node, step) for node in plan["nodes"] for step in node["steps"]]
    steps += [at(node, step) for node in plan["nodes"] for step in node["steps"]
              if not step.get("starts_job")]  # fmt: skip
    steps += [{"host": check["host"], "node": None, "step": check} for check in plan["checks"]]
    for node in plan["nodes"]:
        steps += [at(node, step) for step in node["steps"] if step.get("starts_job")]
    return steps


def mapped(value: Any, late: dict[str, str]) -> Any:
    """The printed value with each late-bound placeholder replaced by what the run found."""
    if isinstance(value, str):
        for placeholder, found in late.items():
            value = value.replace(placeholder, found)
        return value
    if isinstance(value, list):
        return [mapped(item, late) for item in value]
    if isinstance(value, dict):
        return {key: mapped(item, late) for key, item in value.items()}
    return value


def stderr_of_dry_run(env: dict[str, str], spec: Path) -> str:
    done = gpujob(env, "submit", str(spec), "--up", "a100", "--allow-cpu", "--dry-run")
    return done.stderr


def recorded(env: dict[str, str], job_id: str) -> dict[str, Any]:
    """The job's record (hosts, node folders) as the state db holds it."""
    import sqlite3

    db = sqlite3.connect(Path(env["GPUJOB_STATE_DIR"]) / "state.db")
    try:
        hosts, node_dirs = db.execute(
            "SELECT hosts, node_dirs FROM jobs WHERE id=?", (job_id,)
        ).fetchone()
    finally:
        db.close()
    return {"hosts": json.loads(hosts), "node_dirs": json.loads(node_dirs)}


def home_of(env: dict[str, str], job_id: str) -> str:
    """The login's home on the job's host, from where the job's folder went."""
    return str(recorded(env, job_id)["node_dirs"][0].split("/.gpujob/jobs/")[0])


def assert_same(printed: list[Any], ran: list[Any]) -> None:
    assert len(ran) == len(printed), (len(ran), len(printed))
    for rank, (want, got) in enumerate(zip(printed, ran, strict=True)):
        assert got == want, f"step {rank}: ran {got}\nprinted {want}"


def test_local(tmp_path: Path) -> None:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    plan, ran = dry_then_run(env, tmp_path, str(tiny_job(tmp_path)))
    assert plan["provider"] == "local"
    assert_same(printed_steps(plan), ran)  # nothing late-bound here: the same machine


@pytest.mark.lab
def test_ssh_host(tmp_path: Path, ssh_host: Any) -> None:  # noqa: F811
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_HOSTS_FILE=str(ssh_host.hosts_file))  # fmt: skip
    plan, ran = dry_then_run(env, tmp_path, str(tiny_job(tmp_path)), "--on", "lab")
    assert "<home>" in json.dumps(plan)
    late = {"<home>": home_of(env, "same-1")}
    assert [probe["check"] for probe in plan["probes"]] == ["free disk"]
    assert_same(mapped(printed_steps(plan), late), ran)


@pytest.fixture
def lambda_env(lab: None, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A user's shell for the Lambda fake serving lab hosts (as test_up_hosts.py's)."""
    from infra.fakes import LAMBDA_API_KEY, serve_lambda
    from infra.fakes.lab_backend import LabBackend
    from infra.lab import user_key

    backend = LabBackend(tmp_path / "records.json")
    fake = serve_lambda(backend)
    try:
        yield dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
                   GPUJOB_CACHE_DIR=str(tmp_path / "cache"),
                   GPUJOB_HOSTS_FILE=str(tmp_path / "hosts.yaml"),
                   GPUJOB_SSH_KEY=str(user_key()), GPUJOB_POLL_S="0.5",
                   GPUJOB_LAMBDA_SSH_USER="root", LAMBDA_API_KEY=LAMBDA_API_KEY,
                   GPUJOB_LAMBDA_API_URL=fake.url)  # fmt: skip
    finally:
        gpujob(dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state")), "down", "--all",
               "--yes")  # fmt: skip
        fake.stop()
        backend.close()


@pytest.mark.lab
def test_a_rented_host_on_the_lambda_fake(tmp_path: Path, lambda_env: dict[str, str]) -> None:
    """The plan for the host once rented is the plan printed for `<new lambda host 0>`."""
    from infra.lab import job_image
    from launcher.remote.hosts import HostEntry

    image = job_image.build(report=lambda line: print(f"lab: {line}"))
    spec = tiny_job(tmp_path, image)
    plan, ran = dry_then_run(lambda_env, tmp_path, str(spec), "--up", "a100", "--allow-cpu")
    host = HostEntry.from_record(recorded(lambda_env, "same-1")["hosts"][0])
    # `<its ip>` is quoted where a script names it (`<` is a shell word's end), an address not
    late = {"<new lambda host 0>": host.name, "'<its ip>'": host.address, "<its ip>": host.address,
            "<home>": home_of(lambda_env, "same-1")}  # fmt: skip
    assert all(name in json.dumps(plan) for name in ("<new lambda host 0>", "<its ip>"))
    printed = mapped(printed_steps(plan), late)
    if "memlock=-1" not in json.dumps(ran):  # a lab host (a network namespace) cannot lift it
        assert "RLIMIT_MEMLOCK raisable" in stderr_of_dry_run(lambda_env, spec)  # assumed, said
        printed = mapped(printed, {'    "--ulimit",\n    "memlock=-1",\n': ""})
    assert_same(printed, ran)


@pytest.mark.lab
def test_slurm(slurm_cluster: Any, cluster_files: Path, tmp_path: Path) -> None:  # noqa: F811
    """The sbatch script on the shared folder is the one printed; the commands run through
    the login host are the printed ones, in the order queue() sends them: the cluster read,
    the script with `sbatch --test-only` alone (nothing else is written for a job SLURM
    refuses), then every other file and command, then `sbatch --parsable`."""
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_HOSTS_FILE=str(cluster_files))  # fmt: skip
    out, ran = dry_then_run(env, tmp_path, str(tiny_job(tmp_path)), "--on", "slurm:lab",
                            "--detach")  # fmt: skip
    login, plan = out["login"], out["plan"]
    (script,) = [s for s in plan["nodes"][0]["steps"] if s.get("path") == out["script_path"]]
    assert Path(out["script_path"]).read_text() == script["content"]
    describe, test_only = out["before_queue"]
    printed = [{"host": login, "node": None, "step": describe},
               {"host": login, "node": 0, "step": script},
               {"host": login, "node": None, "step": test_only}]  # fmt: skip
    printed += [{"host": login, "node": node["rank"], "step": step} for node in plan["nodes"]
                for step in node["steps"] if step is not script]  # fmt: skip
    printed.append({"host": login, "node": None, "step": out["queue"]})
    assert_same(printed, ran)
