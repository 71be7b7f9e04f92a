"""The ROCm variables that break CUDA jobs (seed 004), and the spec's own `unset_envs`, reach
no process of a job on a real SSH host, however they are set: the host's ~/.bashrc (bash
reads it for SSH commands, so the agent itself starts with them), the host's /etc/environment
(PAM's pam_env puts it in every SSH session: here a second sshd of a lab host with PAM on and
its own /etc/environment; the bare runtime, as a container never inherits it), and the
image's ENV (plus a BASH_ENV rc file, /etc/environment and ~/.bashrc in the image), on both
nodes of a two-host job in containers, down to torchrun's ranks and a bash started by the
run: block."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_diagnostics as diag
import test_remote_jobs as remote
from labtools import SSHHost, docker, gpujob, wait_until

pytestmark = pytest.mark.lab
bare_host = diag.bare_host  # a lab host with sshd only, as hosts.yaml `box`
docker_lab, env = remote.docker_lab, remote.env  # the two docker hosts as `ta`, `tb`
NAMES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "RAY_ADDRESS")
PRINT = "import os; print('set:', sorted(k for k in os.environ if k in {names!r}))"


def test_names_the_hosts_bashrc_exports_reach_no_process_of_the_job(
    tmp_path: Path, bare_host: SSHHost
) -> None:
    rc = bare_host.root / ".bashrc"
    rc.write_text("export ROCR_VISIBLE_DEVICES=0 HIP_VISIBLE_DEVICES=0 RAY_ADDRESS=stale:6379\n")
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_HOSTS_FILE=str(bare_host.hosts_file))  # fmt: skip
    try:
        seen = gpujob(env, "ssh", "box", "--", "echo rocr=$ROCR_VISIBLE_DEVICES")
        assert seen.stdout.decode().strip() == "rocr=0", seen  # the source is live over SSH
        work = tmp_path / "work"
        work.mkdir()
        (work / "show.py").write_text(PRINT.format(names=set(NAMES)) + "\n")
        spec = tmp_path / "job.yaml"
        spec.write_text(
            "name: clash\nimage: host\nworkdir: work\nunset_envs: [RAY_ADDRESS]\n"
            "run: |\n  python3 show.py\n  bash -c 'python3 show.py'\n"
        )
        done = gpujob(env, "submit", str(spec), "--on", "box", "--job-id", "clash-1")
        out = done.stdout.decode()
        assert done.returncode == 0, out + done.stderr.decode()
        assert out.count("set: []") == 2, out  # the block's process and its child's
    finally:
        rc.unlink(missing_ok=True)


CLASH = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "MY_NAME")
EXPORTS = "export ROCR_VISIBLE_DEVICES=0 HIP_VISIBLE_DEVICES=0 MY_NAME=1\n"
SHOW = (
    "import os, sys\n"
    f"names = {set(CLASH)!r}\n"
    "rank = os.environ.get('LOCAL_RANK', '-')\n"
    "line = f'{sys.argv[1]} {rank}: set {sorted(names & set(os.environ))}\\n'\n"
    "os.write(1, line.encode())  # one write: two ranks share the pipe (unbuffered print splits)\n"
)
SHELL_LINE = (
    "echo \"shell -: set [$(env | grep -oE '^(ROCR_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES|MY_NAME)='"
    " | tr -d '=\\n')]\"\n"
)
RUN_BLOCK = "".join(
    f"  {line}\n"
    for line in (
        SHELL_LINE.strip(),
        "python3 show.py python",
        "bash -c 'python3 show.py nested-bash'",
        "torchrun --standalone --nproc_per_node=2 show.py torchrun",
    )
)


def clash_job(folder: Path, image: str, *, nodes: int, torchrun: bool = True) -> Path:
    """A run: block whose every kind of process prints which of the names it sees: the
    block's shell, python, a bash it starts, and (where torch is) two torchrun ranks."""
    (folder / "work").mkdir(parents=True, exist_ok=True)
    (folder / "work" / "show.py").write_text(SHOW)
    block = RUN_BLOCK if torchrun else RUN_BLOCK.split("  torchrun")[0]
    spec = folder / "job.yaml"
    spec.write_text(
        f"name: clash\nimage: {image}\nworkdir: work\nnodes: {nodes}\nunset_envs: [MY_NAME]\n"
        f"envs: {{OMP_NUM_THREADS: 1}}\nrun: |\n{block}"
    )
    return spec


def seen_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if ": set [" in line]


IMAGE_SETS = f"""\
FROM {{base}}
ENV ROCR_VISIBLE_DEVICES=0 HIP_VISIBLE_DEVICES=0 MY_NAME=1 BASH_ENV=/etc/clash.sh
RUN printf '{EXPORTS.strip()}\\n' > /etc/clash.sh \\
    && printf 'ROCR_VISIBLE_DEVICES=0\\nHIP_VISIBLE_DEVICES=0\\nMY_NAME=1\\n' >> /etc/environment \\
    && cat /etc/clash.sh >> /root/.bashrc
"""


@pytest.fixture(scope="module")
def clashing_image(docker_lab: remote.DockerLab) -> Iterator[str]:
    """The lab job image with the names in its ENV, a BASH_ENV file, /etc/environment and
    /root/.bashrc, pushed to the lab registry; the hosts' ref."""
    from infra.lab import job_image, registry

    local = f"gpujob-lab/test-clash:{uuid.uuid4().hex[:12]}"
    built = subprocess.run(["docker", "build", "-q", "-t", local, "-"], capture_output=True,
                           text=True, input=IMAGE_SETS.format(base=job_image.TAG))  # fmt: skip
    assert built.returncode == 0, built.stderr
    try:
        yield registry.push(local, local)
    finally:
        subprocess.run(["docker", "rmi", local], capture_output=True)


def test_names_the_images_env_sets_reach_no_process_on_either_node(
    tmp_path: Path, env: dict[str, str], docker_lab: remote.DockerLab, clashing_image: str
) -> None:
    shown = docker(docker_lab.hosts[0], "run", "--rm", clashing_image, "bash", "-c",
                   "printenv MY_NAME; env -u MY_NAME bash -c 'echo $MY_NAME'")  # fmt: skip
    assert shown.stdout.split() == ["1", "1"], shown  # ENV and BASH_ENV both set it
    spec = clash_job(tmp_path, clashing_image, nodes=2)
    done = gpujob(env, "submit", str(spec), "--on", "ta,tb", "--job-id", "clash-image")
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:] + out[-3000:]
    assert "(docker runtime)" in out
    seen = seen_lines(out)
    assert len(seen) == 2 * 5, out  # per node: shell, python, nested bash, two ranks
    assert all(line.endswith(": set []") for line in seen), "\n".join(seen)
    for node in (0, 1):
        for rank in (0, 1):
            assert f"[node {node}] torchrun {rank}: set []" in seen


PAM_PORT = 2222


@pytest.fixture
def pam_host(docker_lab: remote.DockerLab, tmp_path: Path) -> Iterator[Path]:
    """Host ta as a PAM host sees logins: a second sshd of ta (its network, mount and UTS
    namespaces) on port 2222 with `UsePAM yes`, and an /etc/environment of its own bound in
    a private mount namespace (the machine's stays untouched). Returns a hosts.yaml naming
    it `pam`; the sshd is stopped by its pid."""
    import infra.lab
    from infra.lab import boot, network, state

    host = docker_lab.hosts[0]
    folder = boot.host_dir(host.name)
    etc_environment = folder / "pam-environment"
    etc_environment.write_text("ROCR_VISIBLE_DEVICES=0\nHIP_VISIBLE_DEVICES=0\nMY_NAME=1\n")
    config = folder / "sshd_config_pam"
    config.write_text((folder / "sshd_config").read_text()
                      .replace("Port 22\n", f"Port {PAM_PORT}\n")
                      .replace("UsePAM no\n", "UsePAM yes\n")
                      .replace("sshd.pid", "sshd-pam.pid"))  # fmt: skip
    sshd = state.read_state()["hosts"][host.name]["sshd"]["pid"]
    argv = [
        "nsenter", f"--net={network.NETNS_DIR / host.name}", f"--mount=/proc/{sshd}/ns/mnt",
        f"--uts=/proc/{sshd}/ns/uts", "--",
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", f"mount --bind {etc_environment} /etc/environment && "
                    f"exec /usr/sbin/sshd -D -e -f {config}",
    ]  # fmt: skip
    log = (tmp_path / "sshd-pam.log").open("wb")
    server = subprocess.Popen(argv, stdout=log, stderr=log)
    try:
        wait_until(lambda: server.poll() is not None or _accepts(host.address, PAM_PORT),
                   "the PAM sshd listening", timeout=30)  # fmt: skip
        assert server.poll() is None, (tmp_path / "sshd-pam.log").read_text()
        hosts_file = tmp_path / "hosts.yaml"
        key = infra.lab.user_key()
        entry = f"name: pam, address: {host.address}, port: {PAM_PORT}, user: root, key: {key}"
        hosts_file.write_text(f"hosts:\n  - {{{entry}}}\n")
        yield hosts_file
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _accepts(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=1).close()
        return True
    except OSError:
        return False


def test_names_the_hosts_etc_environment_sets_reach_no_process_of_the_job(
    tmp_path: Path, env: dict[str, str], pam_host: Path
) -> None:
    """The bare runtime only. A container never sees the SSH session's pam_env variables:
    its environment is the image's ENV and docker run's --env-file of explicit values, so
    a container case here could not fail; an /etc/environment inside the image is the
    image case's (test_names_the_images_env_sets_reach_no_process_on_either_node)."""
    runtime = "bare"
    env = dict(env, GPUJOB_HOSTS_FILE=str(pam_host))
    seen = gpujob(env, "ssh", "pam", "--", "echo rocr=$ROCR_VISIBLE_DEVICES name=$MY_NAME")
    assert seen.stdout.decode().split() == ["rocr=0", "name=1"], seen  # pam_env set them
    # the bare runtime runs the host's own python3: no torch there, so no torchrun ranks
    spec = clash_job(tmp_path, "host", nodes=1, torchrun=False)
    done = gpujob(env, "submit", str(spec), "--on", "pam", "--runtime", runtime,
                  "--job-id", f"clash-pam-{runtime}")  # fmt: skip
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:] + out[-3000:]
    assert f"({runtime} runtime)" in out
    seen = seen_lines(out)
    assert len(seen) == 3, out  # the block's shell, python, a nested bash's python
    assert all(line.endswith(": set []") for line in seen), "\n".join(seen)
