"""A job on this machine stays inside its folder, through the real CLI in a throwaway HOME:
SkyPilot's deepspeed-multinode task (its `~/.ssh/id_rsa: ~/.ssh/sky-key` mount) leaves the
user's key and every other file of the home as they were; `/etc/passwd` as a destination is
one line naming the file, line and field; a `pip install` in `setup:` goes into the job's
own venv, never into the venv gpujob runs from; a task without `workdir` ships nothing; a
container image runs in Docker, or is refused where Docker is absent."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
USER_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- the user's own key\n"
SKY_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- sky-key\n"
# SkyPilot's examples/deepspeed-multinode/sky.yaml, CPU-sized: its file_mounts as they are;
# the hostfile and deepspeed's line built from SKYPILOT_* as it builds them, kept in ~.
DEEPSPEED_TASK = """\
resources:
  cpus: 1+

num_nodes: 2

file_mounts:
  ~/.ssh/id_rsa: ~/.ssh/sky-key

setup: |
  echo "setup on $SKYPILOT_NODE_RANK" > ~/setup-ran
  chmod 600 ~/.ssh/id_rsa

run: |
  echo "node $SKYPILOT_NODE_RANK key: $(cat ~/.ssh/id_rsa)"
  echo "node $SKYPILOT_NODE_RANK workdir: [$(ls -A)]"
  if [ "${SKYPILOT_NODE_RANK}" == "0" ]; then
    HOSTFILE_PATH=~/hostfile.${SKYPILOT_TASK_ID}
    python -c "import os;n_gpus=os.environ['SKYPILOT_NUM_GPUS_PER_NODE'] or 1;print('\\n'.join([f'{ip} slots={n_gpus}' for ip in os.environ['SKYPILOT_NODE_IPS'].splitlines()]))" > ${HOSTFILE_PATH}
    echo "deepspeed --hostfile $HOSTFILE_PATH: $(wc -l < $HOSTFILE_PATH) nodes"
  fi
"""  # noqa: E501 (SkyPilot's own line)


def tree_sums(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple[str, int]]:
    """Every file under `root` (links as their target's name): content hash and mode."""
    sums = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder, d) not in skip]
        for name in files:
            path = Path(folder, name)
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            sums[str(path.relative_to(root))] = (hashlib.sha256(data).hexdigest(),
                                                 path.lstat().st_mode)  # fmt: skip
    return sums


def manifest(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `root` with its size, mtime and mode: a venv byte for byte."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            info = Path(folder, name).lstat()
            out[str(Path(folder, name).relative_to(root))] = (
                info.st_size,
                info.st_mtime_ns,
                info.st_mode,
            )
    return out


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A user's home: their own key, the key SkyPilot's task names, a config, some files."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(USER_KEY)
    (home / ".ssh" / "id_rsa").chmod(0o600)
    (home / ".ssh" / "sky-key").write_text(SKY_KEY)
    (home / ".ssh" / "sky-key").chmod(0o600)
    (home / ".bashrc").write_text("export FROM_BASHRC=1\n")
    (home / ".config" / "app").mkdir(parents=True)
    (home / ".config" / "app" / "settings.ini").write_text("[x]\ny = 1\n")
    (home / ".local" / "bin").mkdir(parents=True)
    (home / "notes.txt").write_text("mine\n")
    return home


def env_for(tmp_path: Path, home: Path, **more: str) -> dict[str, str]:
    """gpujob as a user runs it: HOME the throwaway one, its venv activated (first on PATH,
    VIRTUAL_ENV set), its state and cache beside the home."""
    venv_bin = str(Path(sys.executable).parent)
    return {**os.environ, "HOME": str(home), "GPUJOB_STATE_DIR": str(tmp_path / "state"),
            "GPUJOB_CACHE_DIR": str(tmp_path / "cache"), "VIRTUAL_ENV": str(Path(venv_bin).parent),
            "PATH": f"{venv_bin}:{os.environ['PATH']}", **more}  # fmt: skip


def submit(
    cwd: Path, env: dict[str, str], *args: str, gpujob: str = GPUJOB
) -> subprocess.CompletedProcess:
    return subprocess.run([gpujob, "submit", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


def test_skypilots_deepspeed_task_leaves_the_users_home_as_it_was(
    tmp_path: Path, home: Path
) -> None:
    task = home / "deepspeed-multinode"
    task.mkdir()
    (task / "sky.yaml").write_text(DEEPSPEED_TASK)
    (task / "data.bin").write_bytes(b"\0" * 1024)
    before, passwd = tree_sums(home), passwd_state()

    done = submit(task, env_for(tmp_path, home), "sky.yaml", "--job-id", "ds")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for rank in (0, 1):  # the mount is the job's own ~/.ssh/id_rsa on every node
        assert f"[node {rank}] node {rank} key: {SKY_KEY.strip()}" in done.stdout
        assert f"[node {rank}] node {rank} workdir: []" in done.stdout  # no workdir: nothing
    assert "[node 0] deepspeed --hostfile " in done.stdout and ": 2 nodes" in done.stdout

    assert tree_sums(home) == before  # the user's key, and every other file, untouched
    assert (home / ".ssh" / "id_rsa").read_text() == USER_KEY
    assert passwd_state() == passwd
    job_home = tmp_path / "state" / "jobs" / "ds" / "home"  # what the job wrote to ~
    assert (job_home / ".ssh" / "id_rsa").read_text() == SKY_KEY
    assert (job_home / "setup-ran").is_file() and list(job_home.glob("hostfile.ds"))
    assert (job_home / "sky_workdir").resolve() == job_home.parent / "workdir"


def passwd_state() -> tuple[str, int, int]:
    info = Path("/etc/passwd").stat()
    return (
        hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest(),
        info.st_ino,
        info.st_ctime_ns,
    )


def test_an_absolute_destination_is_one_line_naming_its_file_and_line(
    tmp_path: Path, home: Path
) -> None:
    """The source holds /etc/passwd's own bytes, so that a regression that copies it there
    is seen (a new ctime) without breaking the machine's logins."""
    task = home / "task"
    task.mkdir()
    (task / "x.txt").write_bytes(Path("/etc/passwd").read_bytes())
    (task / "sky.yaml").write_text("file_mounts:\n  /etc/passwd: ./x.txt\nrun: cat /etc/passwd\n")
    before, passwd = tree_sums(home), passwd_state()
    done = submit(task, env_for(tmp_path, home), "sky.yaml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gpujob: error: sky.yaml:2: file_mounts./etc/passwd: a job on this "
                           "machine writes only inside its own folder"), last  # fmt: skip
    assert "`--on HOST` or `--up GPU`" in last
    assert passwd_state() == passwd and tree_sums(home) == before
    assert not (tmp_path / "state" / "jobs").exists()  # nothing started


def probe_wheel(folder: Path, version: str) -> Path:
    """A one-module wheel made here (no index, no build backend needed)."""
    info = f"gj_probe-{version}.dist-info"
    files = {
        "gj_probe/__init__.py": f"NAME = 'gj_probe {version}'\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: gj-probe\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{name},sha256={digest(data)},{len(data)}\n" for name, data in files.items())
    record += f"{info}/RECORD,,\n"
    path = folder / f"gj_probe-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", record)
    return path


def gpujob_venv(folder: Path) -> Path:
    """A venv gpujob runs from, made for this test (with pip, as a user's is): the shared
    dev venv's packages and this checkout through a .pth file, `bin/gpujob` its script."""
    venv = folder / "gpujob-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    deps = next((Path(sys.prefix) / "lib").glob("python3*/site-packages"))
    (site / "gpujob-dev.pth").write_text(f"{REPO}\n{deps}\n")
    script = venv / "bin" / "gpujob"
    script.write_text(f"#!{venv}/bin/python\nimport sys\nfrom launcher.cli import main\n"
                      "sys.exit(main())\n")  # fmt: skip
    script.chmod(0o755)
    return venv


def test_setups_pip_install_goes_into_the_jobs_venv_not_gpujobs(tmp_path: Path, home: Path) -> None:
    """The issue's case: gpujob's venv activated (first on PATH), with a package the task's
    setup upgrades (torch there, gj_probe here). The job reads gpujob's venv, installs into
    its own, and gpujob's venv keeps every byte (and the old version)."""
    venv = gpujob_venv(tmp_path)
    old = probe_wheel(tmp_path, "0.9")
    subprocess.run([f"{venv}/bin/pip", "install", "--no-index", "--quiet", str(old)], check=True)
    task = tmp_path / "task"
    task.mkdir()
    wheel = probe_wheel(task, "1.0")
    (task / "sky.yaml").write_text(
        f"workdir: .\nsetup: |\n  pip install --no-index ./{wheel.name}\n"
        "run: |\n  python -c 'import gj_probe, sys; print(gj_probe.NAME, gj_probe.__file__)'\n"
        '  echo "pip: $(command -v pip)"\n  echo "PATH: $PATH"\n'
    )
    env = env_for(tmp_path, home, VIRTUAL_ENV=str(venv), PATH=f"{venv}/bin:{os.environ['PATH']}")
    gpujob = str(venv / "bin" / "gpujob")
    shown = submit(task, env, "sky.yaml", "--dry-run", gpujob=gpujob)  # its own imports' caches
    assert shown.returncode == 0, shown.stderr
    before = manifest(venv)

    done = submit(task, env, "sky.yaml", "--job-id", "pip", gpujob=gpujob)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    job_venv = tmp_path / "state" / "jobs" / "pip" / "venv"
    assert f"gj_probe 1.0 {job_venv}/lib/" in done.stdout  # importable in the job's run
    assert f"pip: {job_venv}/bin/pip" in done.stdout
    path_line = next(line for line in done.stdout.splitlines() if "PATH: " in line)
    assert f"{venv}/bin" not in path_line.split("PATH: ", 1)[1].split(":")
    assert manifest(venv) == before  # the venv gpujob runs from: not one byte changed
    kept = subprocess.run([f"{venv}/bin/python", "-c", "import gj_probe; print(gj_probe.NAME)"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert kept.stdout == "gj_probe 0.9\n"
    found = subprocess.run([sys.executable, "-c", "import gj_probe"], capture_output=True)
    assert found.returncode == 1  # nor in the shared dev venv


LAB_BASE = "gpujob-lab/base:bookworm"
IMAGE = "gpujob-e2e/python:3.11-slim"


@pytest.fixture(scope="module")
def local_image() -> str:
    """A container image this machine's Docker has (none can be pulled here): the lab's base
    image (debootstrap, built once per machine), tagged under a name of this test's own."""
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.fail("Docker does not answer on this machine (`make test` installs and starts it)")
    if subprocess.run(["docker", "image", "inspect", LAB_BASE], capture_output=True).returncode:
        sys.path.insert(0, str(REPO))
        from infra.lab import base_image

        base_image.build(print)
    subprocess.run(["docker", "tag", LAB_BASE, IMAGE], check=True)
    yield IMAGE
    subprocess.run(["docker", "rmi", IMAGE], capture_output=True)


def test_a_container_image_runs_in_docker_here(
    tmp_path: Path, home: Path, local_image: str
) -> None:
    task = home / "task"
    task.mkdir()
    (task / "x.txt").write_text("mounted in the container\n")
    (task / "sky.yaml").write_text(
        f"resources:\n  image_id: docker:{local_image}\nworkdir: .\n"
        "file_mounts:\n  /etc/gpujob-e2e.txt: ./x.txt\n  ~/.ssh/id_rsa: ~/.ssh/sky-key\n"
        "run: |\n  test -f /.dockerenv && echo in a container\n  head -1 /etc/os-release\n"
        "  cat /etc/gpujob-e2e.txt ~/.ssh/id_rsa\n"
    )
    before = tree_sums(home)
    job_id = f"box-{os.getpid()}"  # a container name is the machine's: one per run
    done = submit(task, env_for(tmp_path, home), "sky.yaml", "--job-id", job_id,
                  "--runtime", "docker")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "(docker runtime)" in done.stdout and "in a container\n" in done.stdout
    assert 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' in done.stdout
    assert f"mounted in the container\n{SKY_KEY}" in done.stdout
    assert not Path("/etc/gpujob-e2e.txt").exists()
    assert tree_sums(home) == before
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=gpujob.job={job_id}"],
                          capture_output=True, text=True)  # fmt: skip
    assert left.stdout.strip() == ""  # the agent removed its container


def test_a_container_image_without_docker_is_one_line(tmp_path: Path, home: Path) -> None:
    """PATH without docker (every other program of /usr/bin and /bin kept)."""
    tools = tmp_path / "no-docker-bin"
    tools.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for program in Path(folder).iterdir():
            if program.name != "docker" and not (tools / program.name).exists():
                (tools / program.name).symlink_to(program)
    task = home / "task"
    task.mkdir()
    (task / "job.yaml").write_text(
        "name: slim\nimage: python:3.11-slim\nrun:\n  entrypoint: train.py\n"
    )
    venv_bin = str(Path(sys.executable).parent)
    done = submit(task, env_for(tmp_path, home, PATH=f"{venv_bin}:{tools}"), "job.yaml",
                  "--runtime", "docker")  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(
        "gpujob: error: job.yaml:2: image: python:3.11-slim is a container image and Docker "
        "does not answer on this machine"
    ), done.stderr
    assert not (tmp_path / "state" / "jobs").exists()


def test_pip_settings_that_install_elsewhere_and_the_ssh_agent_stay_out(
    tmp_path: Path, home: Path
) -> None:
    """`PIP_USER=1` in the user's shell would make the job's `pip install` write into the
    user's ~/.local (or fail inside the job's venv); the user's ssh-agent is theirs."""
    task = home / "task"
    task.mkdir()
    (task / "job.yaml").write_text(
        "name: envs\nimage: host\nrun: |\n"
        "  for name in PIP_USER PIP_TARGET PIP_PREFIX PYTHONUSERBASE SSH_AUTH_SOCK; do\n"
        '    echo "$name=${!name-unset}"\n'
        "  done\n"
    )
    env = env_for(tmp_path, home, PIP_USER="1", PIP_TARGET=str(home / "t"),
                  PIP_PREFIX=str(home / "p"), PYTHONUSERBASE=str(home / ".local"),
                  SSH_AUTH_SOCK=str(home / "agent.sock"))  # fmt: skip
    done = submit(task, env, "job.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("PIP_USER", "PIP_TARGET", "PIP_PREFIX", "PYTHONUSERBASE", "SSH_AUTH_SOCK"):
        assert f"{name}=unset" in done.stdout, done.stdout
