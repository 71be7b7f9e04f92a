"""Jobs queued on the lab's SLURM cluster through the real CLI: sshd on the login host,
Debian's slurmctld and two slurmd in their own network namespaces, a shared folder.

Each test asks what a user would: the exit code and the terminal's text, `squeue` and
`sacct -c` on the login host, the files in the shared job folder, the processes on the
nodes. The job environment (images/lab-cpu.yaml) is built once per session on the shared
filesystem from the lab's wheelhouse, as on any host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import point_pip_at, read_some, wait_until
from slurmlab import login_ssh

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
IMAGE = str(REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml")
QUICKSTART = REPO / "jobs" / "quickstart"


@pytest.fixture(scope="module")
def cluster_files(slurm_cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """hosts.yaml with the cluster (`lab`) and entries for the refusals; the login host's
    pip pointed at the lab's wheelhouse (as a cluster's login is pointed at a mirror)."""
    from infra.lab import boot, job_image, state, user_key

    house = _wheelhouse(job_image, state.lab_dir() / "wheelhouse" / "lab-cpu")
    point_pip_at(boot.host_dir(slurm_cluster.login.name) / "root", house / "wheels")
    login = (f"type: slurm, address: {slurm_cluster.login.address}, user: root, "
             f"key: {user_key()}, shared: {slurm_cluster.shared}")  # fmt: skip
    folder = tmp_path_factory.mktemp("slurm")
    hosts = folder / "hosts.yaml"
    hosts.write_text(
        "hosts:\n"
        f"  - {{name: lab, {login}, partition: debug, account: lab}}\n"
        f"  - {{name: noacct, {login}, partition: debug}}\n"
        f"  - {{name: badfeat, {login}, partition: debug, account: lab, constraint: 'h1|h2'}}\n"
    )
    yield hosts


def _wheelhouse(job_image, folder: Path) -> Path:
    pins = job_image.pins()
    listed = folder / "requirements.txt"
    wheels = list((folder / "wheels").glob("*.whl")) if (folder / "wheels").is_dir() else []
    complete = listed.is_file() and listed.read_text() == "\n".join(pins) + "\n"
    if complete and len(wheels) >= len(pins):
        return folder
    return job_image.wheelhouse(pins, folder)


@pytest.fixture
def env(tmp_path: Path, cluster_files: Path) -> dict[str, str]:
    return dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
                GPUJOB_HOSTS_FILE=str(cluster_files))  # fmt: skip


def gpujob(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def spec_file(folder: Path, text: str, program: str | None = None) -> Path:
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    if program is not None:
        (work / "prog.py").write_text(program)
    spec = folder / "job.yaml"
    spec.write_text(text)
    return spec


def shell_job(folder: Path, run: str, extra: str = "") -> Path:
    block = "".join(f"    {line}\n" for line in run.strip().splitlines())
    return spec_file(folder, f"name: sh\nimage: host\nworkdir: work\nnodes: 2\n{extra}"
                             f"run:\n  shell: |\n{block}")  # fmt: skip


def squeue(cluster) -> str:
    done = login_ssh(cluster, "squeue -h -o '%i %T %j'")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def job_dir(cluster, job_id: str) -> Path:
    return Path(cluster.shared) / ".gpujob" / "jobs" / job_id


def slurm_id(env: dict[str, str], job_id: str) -> str:
    import sqlite3

    db = sqlite3.connect(Path(env["GPUJOB_STATE_DIR"]) / "state.db")
    try:
        return db.execute("SELECT scheduler_job FROM jobs WHERE id=?", (job_id,)).fetchone()[0]
    finally:
        db.close()


def sacct(cluster, slurm_job: str) -> tuple[str, str]:
    done = login_ssh(cluster, f"sacct -c -n -P -j {slurm_job} --format=JobID,State,ExitCode")
    rows = [line.split("|") for line in done.stdout.splitlines() if line.startswith(slurm_job)]
    assert rows, done.stdout + done.stderr
    return rows[-1][1].split()[0], rows[-1][2]


def no_job_processes(cluster, job_id: str) -> bool:
    """No process of the job (its run.sh, agent or program, and what they started, such as a
    `sleep 300` whose command line names nothing of the job) on any host: by its job folder
    in their command lines or the job's id in their environment (run.sh exports it as
    SKYPILOT_TASK_ID; children inherit it)."""
    from launcher.agent.agent_os import alive

    folder = str(job_dir(cluster, job_id)).encode()
    marker = f"SKYPILOT_TASK_ID={job_id}\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes() + b"\0"
        except OSError:
            continue
        mine = folder in cmdline or marker in environ or environ.startswith(marker)
        if mine and alive(int(entry.name)):
            return False
    return True


# -- refusals: one line naming the field, exit 2, nothing queued ------------------------------


@pytest.mark.parametrize(
    ("on", "extra", "said"),
    [
        ("slurm:lab/nope", "", r"partition: 'nope' does not exist on cluster lab"),
        ("slurm:lab", "resources: {accelerators: 'A100:1'}\n",
         r"job.yaml:\d+: resources.accelerators: 1 GPU\(s\) per node, but the nodes of "
         r"partition debug have none"),
        ("slurm:noacct", "", r"hosts\[1\] \(noacct\): account: missing"),
        ("slurm:lab/short", "max_duration: 5m\n",
         r"job.yaml:\d+: max_duration: 5 min \+ 4 min for SLURM's time-limit warning = "
         r"--time=9, over the MaxTime of partition short \(2 min\)"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_before_queueing(
    slurm_cluster, env: dict[str, str], tmp_path: Path, on: str, extra: str, said: str
) -> None:
    spec = shell_job(tmp_path, "echo hi", extra)
    done = gpujob(env, "submit", str(spec), "--on", on)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert re.search(said, lines[0]), done.stderr
    assert "Traceback" not in done.stderr
    assert squeue(slurm_cluster) == ""


def test_a_test_only_refusal_leaves_no_files(
    slurm_cluster, env: dict[str, str], tmp_path: Path
) -> None:
    """A request only SLURM can refuse (a feature expression): exit 2 naming sbatch's words,
    nothing queued, and no job folder (no secrets) left on the shared filesystem."""
    spec = shell_job(tmp_path, "echo hi", "envs: {X: 1}\n")
    spec.write_text(spec.read_text().replace("name: sh", "name: refusedfeat"))
    done = gpujob(env, "submit", str(spec), "--on", "slurm:badfeat")
    assert done.returncode == 2, done.stderr
    assert re.search(r"hosts\[2\] \(badfeat\): sbatch --test-only refused the job: .*feature",
                     done.stderr.splitlines()[0]), done.stderr  # fmt: skip
    assert squeue(slurm_cluster) == ""
    assert not list(Path(slurm_cluster.shared).glob(".gpujob/jobs/refusedfeat-*"))


def test_dry_run_prints_the_script_and_the_sbatch_command(
    slurm_cluster, env: dict[str, str], tmp_path: Path
) -> None:
    spec = shell_job(tmp_path, "echo hi")
    done = gpujob(env, "submit", str(spec), "--on", "slurm:lab", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --nodes=2" in done.stdout
    assert "#SBATCH --signal=B:USR1@120" in done.stdout
    assert re.search(r"run   sbatch --parsable \S+/job\.sbatch\n", done.stdout)
    assert squeue(slurm_cluster) == ""
    assert not list(Path(slurm_cluster.shared).glob(".gpujob/jobs/sh-*"))


# -- the quickstart on both nodes -------------------------------------------------------------


def test_quickstart_on_two_nodes(slurm_cluster, env: dict[str, str], tmp_path: Path) -> None:
    spec = spec_file(tmp_path, (QUICKSTART.parent / "quickstart.yaml").read_text()
                     .replace("workdir: quickstart", f"workdir: {QUICKSTART}")
                     .replace("image: lab-cpu", f"image: {IMAGE}")
                     .replace("name: quickstart", "name: quickstart\nnodes: 2")
                     .replace('"--steps", "60"', '"--steps", "40"'))  # fmt: skip
    follow = subprocess.Popen([GPUJOB, "submit", str(spec), "--on", "slurm:lab"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert follow.stdout is not None
    first = read_some(follow.stdout, "the job's first log line", timeout=240)
    assert follow.poll() is None, "the log streams while the job runs"
    out, err = follow.communicate(timeout=600)
    out = (first + out).decode()
    err = err.decode()
    assert follow.returncode == 0, err + out[-3000:]
    for rank in range(4):  # world size 4: two ranks on each node
        assert f"rank {rank}/4: done" in out, out[-2000:]
    job_id = re.search(r"job (quickstart-\S+):", err).group(1)  # type: ignore[union-attr]
    checkpoints = job_dir(slurm_cluster, job_id) / "checkpoints"
    complete = sorted(p.name for p in checkpoints.glob("checkpoint-*")
                      if (p / ".gpujob-complete").exists())  # fmt: skip
    assert complete == ["checkpoint-20", "checkpoint-40"], complete
    assert sacct(slurm_cluster, slurm_id(env, job_id)) == ("COMPLETED", "0:0")
    assert "[node 1]" in out


# -- a failing rank, a cancel, a queue, the time limit ----------------------------------------

FAILS_ON_NODE_1 = """
echo "node $GPUJOB_NODE_RANK of $GPUJOB_NUM_NODES, head $GPUJOB_HEAD_IP"
if [ "$GPUJOB_NODE_RANK" = 1 ]; then
  echo "rank on node 1: loading shard 7"
  echo "rank on node 1: ValueError: shard 7 is corrupt"
  exit 7
fi
sleep 120
"""


def test_a_rank_failing_on_node_1(slurm_cluster, env: dict[str, str], tmp_path: Path) -> None:
    spec = shell_job(tmp_path, FAILS_ON_NODE_1)
    done = gpujob(env, "submit", str(spec), "--on", "slurm:lab", timeout=120)
    assert done.returncode == 7, done.stderr
    job_id = re.search(r"job (sh-\S+):", done.stderr).group(1)  # type: ignore[union-attr]
    assert sacct(slurm_cluster, slurm_id(env, job_id)) == ("FAILED", "7:0")
    assert "node 1 failed first (exit code 7); its last lines:" in done.stderr
    assert "[node 1] rank on node 1: ValueError: shard 7 is corrupt" in done.stderr
    head = re.search(r"head (\S+)", done.stdout).group(1)  # type: ignore[union-attr]
    assert head == slurm_cluster.nodes[sorted(slurm_cluster.nodes)[0]]  # node 0's NodeAddr
    wait_until(
        lambda: squeue(slurm_cluster) == "", "the job gone from squeue", timeout=30, every=0.5
    )
    wait_until(lambda: no_job_processes(slurm_cluster, job_id), "no process of the job left",
               timeout=30, every=0.5)  # fmt: skip


def test_cancel_while_running(slurm_cluster, env: dict[str, str], tmp_path: Path) -> None:
    spec = shell_job(tmp_path, "echo started on $GPUJOB_NODE_RANK\nsleep 300")
    done = gpujob(env, "submit", str(spec), "--on", "slurm:lab", "--detach")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    folder = job_dir(slurm_cluster, job_id)

    def both_started() -> bool:
        return all((folder / f"node-{r}" / "job.log").is_file()
                   and b"started on" in (folder / f"node-{r}" / "job.log").read_bytes()
                   for r in (0, 1))  # fmt: skip

    wait_until(both_started, "both nodes running", timeout=60)
    done = gpujob(env, "cancel", job_id)
    assert done.returncode == 0, done.stderr
    assert squeue(slurm_cluster) == ""
    wait_until(lambda: no_job_processes(slurm_cluster, job_id), "no process of the job left",
               timeout=30, every=0.5)  # fmt: skip
    states = [json.loads((folder / f"node-{r}" / "status.json").read_text())["state"]
              for r in (0, 1)]  # fmt: skip
    assert states == ["cancelled", "cancelled"]
    row = json.loads(gpujob(env, "status", "--json").stdout)["jobs"][0]
    assert row["state"] == "cancelled"


def test_a_killed_agent_leaves_nothing_of_the_job_on_the_nodes(
    slurm_cluster, env: dict[str, str], tmp_path: Path
) -> None:
    """`kill -9` of node 0's supervisor (an OOM killer): its job's processes sit outside
    what SLURM tracks, so the node step stops them before the step ends; the other node is
    stopped by srun; cancel then finds the job ended and nothing of it is left."""
    from infra.lab import known_hosts_path, user_key

    spec = shell_job(tmp_path, "echo started on $GPUJOB_NODE_RANK $(hostname)\nsleep 300")
    done = gpujob(env, "submit", str(spec), "--on", "slurm:lab", "--detach")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    folder = job_dir(slurm_cluster, job_id)
    log = folder / "node-0" / "job.log"
    wait_until(lambda: log.is_file() and b"started on 0" in log.read_bytes(), "node 0 running",
               timeout=60)  # fmt: skip
    host = re.search(rb"started on 0 (\S+)", log.read_bytes()).group(1).decode()  # type: ignore[union-attr]
    supervisor = json.loads((folder / "node-0" / "status.json").read_text())["supervisor_pid"]
    killed = subprocess.run(
        ["ssh", "-i", str(user_key()), "-o", f"UserKnownHostsFile={known_hosts_path()}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
         f"root@{slurm_cluster.nodes[host]}", f"kill -9 {supervisor}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert killed.returncode == 0, killed.stderr

    done = gpujob(env, "cancel", job_id)
    assert done.returncode == 0, done.stderr
    wait_until(
        lambda: squeue(slurm_cluster) == "", "the job gone from squeue", timeout=60, every=0.5
    )
    wait_until(lambda: no_job_processes(slurm_cluster, job_id), "no process of the job left",
               timeout=30, every=0.5)  # fmt: skip
    node_0 = json.loads((folder / "node-0" / "status.json").read_text())
    # the node step saw the supervisor gone first (it looks every 0.1 s), or scancel's TERM
    # reached it first: either way the agent stopped what was left and recorded why
    assert (node_0["state"] == "lost" and node_0["reason"].startswith(
        "the agent died; the node's SLURM step ")) or (
        node_0["state"] == "cancelled" and node_0["reason"].startswith(
            "cancelled after the agent died")), node_0  # fmt: skip
    assert b"stopping what is left of the job" in log.read_bytes()


def test_logs_say_pending_and_why_then_stream(
    slurm_cluster, env: dict[str, str], tmp_path: Path
) -> None:
    blocker = login_ssh(slurm_cluster, "sbatch --parsable --nodes=2 --exclusive --chdir=/tmp "
                        "--output=/dev/null --job-name=blocker --wrap 'sleep 300'")  # fmt: skip
    assert blocker.returncode == 0, blocker.stderr
    blocker_id = blocker.stdout.strip()
    try:
        wait_until(lambda: "RUNNING blocker" in squeue(slurm_cluster), "the blocker running",
                   timeout=30)  # fmt: skip
        spec = shell_job(tmp_path, "echo streamed from node $GPUJOB_NODE_RANK")
        done = gpujob(env, "submit", str(spec), "--on", "slurm:lab", "--detach")
        assert done.returncode == 0, done.stderr
        job_id = done.stdout.strip()
        follow = subprocess.Popen([GPUJOB, "logs", job_id, "-f"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        assert follow.stderr is not None
        said = read_some(follow.stderr, "the follow's first words", timeout=30).decode()
        assert re.search(r"SLURM job \d+ is PENDING \((Resources|Priority)\); its log streams "
                         "once it starts", said), said  # fmt: skip
        row = json.loads(gpujob(env, "status", "--json").stdout)["jobs"][0]
        assert row["state"] == "pending"
        assert re.search(r"SLURM PENDING \((Resources|Priority)\)", row["last_line"]), row
    finally:
        login_ssh(slurm_cluster, f"scancel {blocker_id}")
    out, err = follow.communicate(timeout=120)
    assert follow.returncode == 0, err
    assert b"[node 0] streamed from node 0\n" in out
    assert b"[node 1] streamed from node 1\n" in out


def test_time_limit_warns_the_agent_which_saves(
    slurm_cluster, env: dict[str, str], tmp_path: Path
) -> None:
    """SLURM's warning as `--signal=B:USR1` sends it, but at a known moment: once training
    runs, `scancel --signal=USR1 --batch` (reference C.7), so no scheduler tick decides."""
    spec = spec_file(tmp_path, (
        f"name: limited\nimage: {IMAGE}\nworkdir: {QUICKSTART}\nnodes: 2\nmax_duration: 10m\n"
        "run:\n  entrypoint: train.py\n  nproc_per_node: 1\n"
        '  args: ["--steps", "100000", "--save-every", "1000000", "--log-every", "50"]\n'
        "envs: {OMP_NUM_THREADS: 1}\ncheckpoints: {dir: checkpoints}\n"
    ))  # fmt: skip
    done = gpujob(env, "submit", str(spec), "--on", "slurm:lab", "--detach")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    folder = job_dir(slurm_cluster, job_id)
    log0 = folder / "node-0" / "job.log"
    try:  # a bound against a hang only: 2 nodes of CPU training start slowly on a busy box
        wait_until(lambda: log0.is_file() and re.search(rb"step \d+/100000", log0.read_bytes()),
                   "a training step in node 0's log", timeout=300)  # fmt: skip
    except AssertionError as err:
        said = log0.read_text()[-2000:] if log0.is_file() else "(no log)"
        queue = squeue(slurm_cluster)
        login_ssh(slurm_cluster, f"scancel {slurm_id(env, job_id)}")  # leave the nodes idle
        raise AssertionError(f"{err}; squeue: {queue}; node 0's log ends: {said}") from None
    warned = login_ssh(slurm_cluster, f"scancel --signal=USR1 --batch {slurm_id(env, job_id)}")
    assert warned.returncode == 0, warned.stderr
    done = gpujob(env, "logs", job_id, "-f", timeout=120)
    assert done.returncode == 124, done.stderr
    step = re.search(r"timed out after 14m \(SLURM's time limit, --time; stopped at its USR1 "
                     r"warning\); last checkpoint: step (\d+)", done.stderr)  # fmt: skip
    assert step, done.stderr
    log = log0.read_text()
    assert "[gpujob-agent] SLURM's time limit is near (USR1, 120 s before it)" in log
    assert f"stopped by SIGTERM at step {step.group(1)}/100000" in log
    saved = folder / "checkpoints" / f"checkpoint-{step.group(1)}"
    assert (saved / ".gpujob-complete").exists()
    assert not (folder / "node-1" / "secrets.json").exists()


def test_sync_ckpt_pushes_a_slurm_jobs_checkpoints_and_a_pull_verifies_them(
    lab: None, slurm_cluster, env: dict[str, str], tmp_path: Path
) -> None:
    """`sync-ckpt JOB` of a SLURM job (issue 25): reached through the cluster's login host
    (the shared filesystem holds node 0's folder), it pushes the job's complete checkpoints
    to the lab's S3; a pull of the latest equals the cluster's copy."""
    import json

    from labtools import with_lab_s3

    env = with_lab_s3(env, tmp_path)
    spec = spec_file(tmp_path, (QUICKSTART.parent / "quickstart.yaml").read_text()
                     .replace("workdir: quickstart", f"workdir: {QUICKSTART}")
                     .replace("image: lab-cpu", f"image: {IMAGE}")
                     .replace('"--steps", "60"', '"--steps", "40"'))  # fmt: skip
    done = gpujob(env, "submit", str(spec), "--on", "slurm:lab", "--job-id", "sc-slurm",
                  timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    pushed = gpujob(env, "sync-ckpt", "sc-slurm", "--to", "lab:runs/sc", "--json")
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    moved = json.loads(pushed.stdout)["checkpoints"]
    assert [(m["name"], m["verified"]) for m in moved] == [
        ("checkpoint-20", True), ("checkpoint-40", True)]  # fmt: skip
    fresh = tmp_path / "fresh"
    pulled = gpujob(env, "sync-ckpt", "--from", "lab:runs/sc", "--latest", "--dest", str(fresh))
    assert pulled.returncode == 0, pulled.stderr[-2000:]

    def files(path: Path) -> dict[str, bytes]:
        return {p.relative_to(path).as_posix(): p.read_bytes()
                for p in path.rglob("*")
                if p.is_file() and p.name != ".gpujob-complete"}  # fmt: skip

    theirs = job_dir(slurm_cluster, "sc-slurm") / "checkpoints" / "checkpoint-40"
    assert files(fresh / "checkpoint-40") == files(theirs) != {}
