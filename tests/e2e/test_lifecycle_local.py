"""SkyPilot 0.14's lifecycle hooks and git workdir, run for real on this machine through the
real CLI and agent: a cancel runs the task's stop hooks before the SIGTERM (one failing and
one past its timeout do not hold it up) and `gpujob logs` shows what they printed; a
`workdir: {url, ref}` is cloned at the ref into the job's workdir from a bare repository
served by file:// (loopback only), and an unknown ref fails the submit in one clear line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_local_sandbox import local_image  # noqa: F401 (a fixture: the lab's base image)

pytestmark = pytest.mark.e2e

GPUJOB = str(Path(sys.executable).with_name("gpujob"))

HOOKED = """\
name: hooked
envs:
  GREETING: hello-from-envs
config:
  hooks:
    - run: echo "first hook fails"; exit 3
      events: [stop]
    - run: sleep 60
      events: [stop]
      timeout: 1
    - run: echo "hook saw $GREETING at $GPUJOB_LIFECYCLE_EVENT in $(basename $(pwd))"
    - run: echo "preempted, saving"
      events: [preemption]
run: |
  echo job running
  sleep 300
"""


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))


def gpujob(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


def _job_id(submitted: subprocess.CompletedProcess[str]) -> str:
    assert submitted.returncode == 0, submitted.stderr
    found = re.search(r"gpujob logs (\S+) -f", submitted.stdout + submitted.stderr)
    assert found, submitted.stderr
    return found[1]


def _wait_running(env: dict[str, str], job_id: str) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = gpujob(env, "status", "--json")
        row = next(r for r in json.loads(result.stdout)["jobs"] if r["id"] == job_id)
        if row["state"] == "running" and "job running" in gpujob(env, "logs", job_id).stdout:
            return row
        time.sleep(0.3)
    raise AssertionError(f"{job_id} never ran")


def test_a_cancel_runs_the_stop_hooks_and_logs_show_them(
    tmp_path: Path, state: dict[str, str]
) -> None:
    spec = tmp_path / "task.yaml"
    spec.write_text(HOOKED)
    job_id = _job_id(gpujob(state, "submit", str(spec), "-d"))
    _wait_running(state, job_id)
    node_dir = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / job_id / "node-0"
    # what a host's preemption notice does (lifecycle_hooks.py): the hooks of that event
    agent = [sys.executable, str(node_dir.parent / "gpujob-agent.py")]
    noticed = subprocess.run([*agent, "hooks", str(node_dir), "preemption"], check=False,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert noticed.returncode == 0, noticed.stderr

    started = time.monotonic()
    cancelled = gpujob(state, "cancel", job_id, "--grace", "5")
    assert cancelled.returncode == 0, cancelled.stderr
    assert time.monotonic() - started < 30  # the 60 s hook was stopped at its 1 s timeout
    log = gpujob(state, "logs", job_id).stdout.splitlines()
    agent_lines = [line for line in log if "lifecycle hook" in line or "cancel:" in line]
    assert agent_lines == [
        "[gpujob-agent] lifecycle hook 1/2 (preemption): running (timeout 3600 s)",
        "[gpujob-agent] lifecycle hook 1/2 (preemption): done",
        "[gpujob-agent] lifecycle hook 2/2 (preemption): running (timeout 3600 s)",
        "[gpujob-agent] lifecycle hook 2/2 (preemption): done",
        "[gpujob-agent] lifecycle hook 1/3 (stop): running (timeout 3600 s)",
        "[gpujob-agent] lifecycle hook 1/3 (stop): exited 3; the stop goes on",
        "[gpujob-agent] lifecycle hook 2/3 (stop): running (timeout 1 s)",
        "[gpujob-agent] lifecycle hook 2/3 (stop): timed out after 1 s and was stopped; the "
        "stop goes on",
        "[gpujob-agent] lifecycle hook 3/3 (stop): running (timeout 3600 s)",
        "[gpujob-agent] lifecycle hook 3/3 (stop): done",
        "[gpujob-agent] cancel: SIGTERM to the job, SIGKILL after 5 s",
    ]
    assert "hook saw hello-from-envs at preemption in workdir" in log  # every event by default
    assert "preempted, saving" in log
    assert "first hook fails" in log
    assert "hook saw hello-from-envs at stop in workdir" in log
    rows = json.loads(gpujob(state, "status", "--json").stdout)["jobs"]
    assert next(r for r in rows if r["id"] == job_id)["state"] == "cancelled"
    # a second cancel of the ended job runs no hook again
    gpujob(state, "cancel", job_id)
    assert gpujob(state, "logs", job_id).stdout.count("hook 3/3 (stop): done") == 1


def _bare_repo(tmp_path: Path) -> str:
    """A repository with tags v1 and v2 (VERSION says which), cloned bare: file:// only."""
    src, bare = tmp_path / "src", tmp_path / "repo.git"
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")  # fmt: skip
    subprocess.run(["git", "init", "-q", str(src)], check=True, env=env)
    for version in ("v1", "v2"):
        (src / "VERSION").write_text(version + "\n")
        subprocess.run(["git", "-C", str(src), "add", "VERSION"], check=True, env=env)
        subprocess.run(["git", "-C", str(src), "commit", "-qm", version], check=True, env=env)
        subprocess.run(["git", "-C", str(src), "tag", version], check=True, env=env)
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True, env=env)
    return f"file://{bare}"


def test_a_git_workdir_is_cloned_at_its_ref(tmp_path: Path, state: dict[str, str]) -> None:
    url = _bare_repo(tmp_path)
    spec = tmp_path / "task.yaml"
    spec.write_text(f"workdir:\n  url: {url}\n  ref: v1\nrun: cat VERSION\n")
    done = gpujob(state, "submit", str(spec))
    assert done.returncode == 0, done.stderr
    assert "v1" in done.stdout.splitlines()

    spec.write_text(f"workdir:\n  url: {url}\n  ref: v9\nrun: cat VERSION\n")
    failed = gpujob(state, "submit", str(spec))
    assert failed.returncode == 1
    assert f"gpujob: workdir_git: {url} has no ref v9; give a branch, tag or commit it has" \
        in failed.stderr.splitlines()  # fmt: skip


FAKE_HF = """\
#!/bin/sh
# A stand-in for the Hugging Face CLI (no hub is reachable from a test): records its
# arguments, and the token its environment brought, in the folder it was asked to fill.
while [ $# -gt 0 ]; do
  [ "$1" = --local-dir ] && dst=$2
  printf '%s\\n' "$1" >>/tmp/gpujob-fake-hf.$$
  shift
done
mkdir -p "$dst" && mv /tmp/gpujob-fake-hf.$$ "$dst/args.txt"
printf '%s\\n' "${HF_TOKEN:-none}" >"$dst/token.txt"
"""
HF_TASK = """\
envs:
  HF_TOKEN: null
file_mounts:
  data: hf://datasets/org/set@v2/train
run: cat data/args.txt data/token.txt
"""


def test_hf_sources_are_fetched_by_the_nodes_cli_before_setup(
    tmp_path: Path, state: dict[str, str]
) -> None:
    """hf:// sources through the node's `hf download`, here a fake `hf` on PATH (the test must
    not reach the internet, and no hub is reachable): its arguments as the plan gives them,
    HF_TOKEN from its environment and never among them; without the CLI, one clear line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hf").write_text(FAKE_HF)
    (bin_dir / "hf").chmod(0o755)
    spec = tmp_path / "task.yaml"
    spec.write_text(HF_TASK)
    env = dict(state, HF_TOKEN="hf_e2e_secret", PATH=f"{bin_dir}:{state['PATH']}")
    done = gpujob(env, "submit", str(spec))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    args = lines[lines.index("download"):lines.index("hf_e2e_secret")]  # fmt: skip
    assert args == ["download", "org/set", "--repo-type", "dataset", "--revision", "v2",
                    "--include", "train", "--include", "train/*",
                    "--local-dir", "data"]  # fmt: skip
    assert "[gpujob] hf_mounts.data: fetching hf://datasets/org/set@v2/train with hf" in lines

    failed = gpujob(dict(state, HF_TOKEN="hf_e2e_secret"), "submit", str(spec))
    assert failed.returncode != 0
    assert ("[gpujob] hf_mounts.data: hf://datasets/org/set@v2/train: the Hugging Face CLI (hf "
            "or huggingface-cli) is not on this node; install it in the image or on the host "
            "(pip install -U huggingface_hub)") in failed.stdout + failed.stderr  # fmt: skip
    assert "hf_e2e_secret" not in failed.stdout + failed.stderr


def test_a_containers_stop_hook_runs_inside_it_with_the_jobs_secrets(
    tmp_path: Path,
    state: dict[str, str],
    local_image: str,  # noqa: F811 (the fixture)
) -> None:
    """With the docker runtime the hook runs in the job's container (`docker exec`), where the
    job's secrets are, as SkyPilot runs hooks where the task runs."""
    spec = tmp_path / "task.yaml"
    spec.write_text(f"resources:\n  image_id: docker:{local_image}\nenvs:\n  MY_TOKEN: null\n"
                    "config:\n  hooks:\n    - run: test -f /.dockerenv && echo in the container"
                    " with $MY_TOKEN\n      events: [stop]\n"
                    "run: |\n  echo job running\n  sleep 300\n")  # fmt: skip
    env = dict(state, MY_TOKEN="tok-in-container")
    job_id = f"hooked-box-{os.getpid()}"  # a container name is the machine's: one per run
    _job_id(gpujob(env, "submit", str(spec), "-d", "--runtime", "docker", "--job-id", job_id))
    _wait_running(env, job_id)
    assert gpujob(env, "cancel", job_id, "--grace", "5").returncode == 0
    log = gpujob(env, "logs", job_id).stdout.splitlines()
    assert "in the container with tok-in-container" in log
    assert log.index("[gpujob-agent] lifecycle hook 1/1 (stop): done") < log.index(
        "[gpujob-agent] cancel: docker stop (SIGTERM, SIGKILL after 5 s)"
    )


def test_git_token_reaches_git_through_the_clones_credential_helper(
    tmp_path: Path, state: dict[str, str]
) -> None:
    """GIT_TOKEN (a secret) goes on the clone's stdin, and git gets it from the credential
    helper the clone script sets: asked here with `git credential fill` (no server is
    reachable from a test); the submit with the token clones as without it."""
    from launcher.plan.node_sources import CLONE

    helper = re.search(r"auth='(.*)'", CLONE)
    assert helper
    filled = subprocess.run(
        ["git", "-c", "credential.helper=", "-c", f"credential.helper={helper[1]}",
         "credential", "fill"], input="protocol=https\nhost=git.example.invalid\n\n",
        env=dict(os.environ, GIT_TOKEN="ghp_e2e"), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "username=x-access-token\npassword=ghp_e2e\n" in filled.stdout
    spec = tmp_path / "task.yaml"
    spec.write_text(f"workdir:\n  url: {_bare_repo(tmp_path)}\n  ref: v2\nsecrets:\n"
                    "  GIT_TOKEN: null\nrun: cat VERSION\n")  # fmt: skip
    done = gpujob(dict(state, GIT_TOKEN="ghp_e2e"), "submit", str(spec))
    assert done.returncode == 0, done.stderr
    assert "v2" in done.stdout.splitlines() and "ghp_e2e" not in done.stdout + done.stderr


PREEMPTIBLE = """\
name: preemptible
envs:
  SAVED_TO: {saved}
config:
  hooks:
    - run: echo "saving before the host goes ($GPUJOB_LIFECYCLE_EVENT)"; echo saved > "$SAVED_TO"
      events: [preemption]
    - run: echo "stop hook ran"
      events: [stop]
run: |
  echo job running
  sleep 300
"""


def test_a_sigterm_that_is_no_cancel_runs_the_preemption_hooks_then_stops_the_job(
    tmp_path: Path, state: dict[str, str]
) -> None:
    """What a host going away does to node 0's supervisor (a stopped container's init, a
    shutdown): SIGTERM with no cancel of gpujob's. The preemption hooks run (their output
    in `gpujob logs`), then the job is stopped and its end recorded; no stop hook runs."""
    spec = tmp_path / "task.yaml"
    spec.write_text(PREEMPTIBLE.format(saved=tmp_path / "saved"))
    job_id = _job_id(gpujob(state, "submit", str(spec), "-d"))
    _wait_running(state, job_id)
    node_dir = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / job_id / "node-0"
    supervisor = json.loads((node_dir / "status.json").read_text())["supervisor_pid"]
    os.kill(supervisor, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if json.loads((node_dir / "status.json").read_text()).get("state") != "running":
            break
        time.sleep(0.3)
    log = gpujob(state, "logs", job_id).stdout.splitlines()
    assert "saving before the host goes (preemption)" in log
    agent_lines = [line for line in log if line.startswith("[gpujob-agent]")]
    assert agent_lines[:3] == [
        "[gpujob-agent] SIGTERM without a cancel of gpujob's: the host is going away "
        "(preemption); its hooks run, then the job is stopped",
        "[gpujob-agent] lifecycle hook 1/1 (preemption): running (timeout 3600 s)",
        "[gpujob-agent] lifecycle hook 1/1 (preemption): done",
    ]
    assert "stop hook ran" not in log
    assert (tmp_path / "saved").read_text() == "saved\n"  # with the job's envs
    rows = json.loads(gpujob(state, "status", "--json").stdout)["jobs"]
    assert next(r for r in rows if r["id"] == job_id)["state"] in ("failed", "cancelled")
