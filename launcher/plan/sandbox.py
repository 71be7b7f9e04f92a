"""A job on the user's own machine stays inside its folder (`NodeLayout.sandbox`): nothing of it
writes over the user's files or into the environment gpujob runs from.

- Its HOME is the job's `home/`: a `~/...` file_mounts destination lands there (SkyPilot's
  `~/.ssh/id_rsa: ~/.ssh/sky-key` no longer replaces the user's key), and so does whatever
  the job writes to `~` (`pip install --user`, `~/.config`). `home/sky_workdir` is the job's
  workdir, as SkyPilot's `~/sky_workdir` is. Caches (pip, Hugging Face, torch) go to one
  folder under gpujob's cache dir shared by local jobs, so each job does not download again.
- An absolute destination outside the job is refused under the bare runtime; in a container
  it is placed under the job's `container-root/` and mounted at its path there.
- `image: host` runs in a venv of the job's own, made from `python3` as the user's PATH finds
  it, with `--system-site-packages` and that python3's own site dirs added (a .pth: a venv's
  packages too, torch in /opt/torch/.venv on a GPU machine): what the user's python3 has is
  there, read-only, and a `pip install` in `setup:` goes into the job's venv, as SkyPilot
  users expect of a fresh host. When that python3 is the venv gpujob runs from (activated),
  the job reads its packages and never changes them (pip leaves what lies outside the
  environment it installs into). The venv is made without pip when the host's Python has pip
  (its own is then run: 30 ms, where ensurepip takes 2 s), with ensurepip otherwise.
- The bin of the venv gpujob runs from leaves the job's PATH, and VIRTUAL_ENV names the job's.
"""

from __future__ import annotations

import posixpath
import shlex

from launcher.errors import UsageError
from launcher.plan.model import NodeLayout, RunCommand

CONTAINER_ROOT = "container-root"
# $1 the job's home: made, with SkyPilot's ~/sky_workdir as a link to the job's workdir;
# then the shared cache, if any (made here: Docker would make a missing one as root).
MAKE_HOME = 'mkdir -p "$@" && ln -sfn ../workdir "$1/sky_workdir"'
PIP_SCRIPT = "import sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"
# Run by the host's python3: a .pth line per site dir of its own (a venv's too, which
# --system-site-packages alone would not show) and the user's own (`pip install --user`:
# read, never written, by the job's pip), added after the job's venv's own.
HOST_SITES = (
    "import site\n"
    "sites = site.getsitepackages() + [site.getusersitepackages()] * bool(site.ENABLE_USER_SITE)\n"
    'print("".join(f"import site; site.addsitedir({p!r})\\n" for p in sites))'
)
PURELIB = 'import sysconfig; print(sysconfig.get_path("purelib"))'


def job_home(job_dir: str) -> str:
    return f"{job_dir}/home"


def job_venv(job_dir: str) -> str:
    return f"{job_dir}/venv"


def uses_job_venv(target: NodeLayout, has_image: bool) -> bool:
    """`image: host` on this machine under the bare runtime (an image has its own env)."""
    return target.sandbox and target.runtime == "bare" and not has_image


def runs_in_docker(definition: bool, ref: str | None, runtime: str, where: str) -> bool:
    """A container image name (`ref` without a definition) always runs in Docker here, never
    on this machine's Python; a definition only with `--runtime docker` (its pinned venv
    otherwise, as `make run` does). `where`: the file:line of `image:`."""
    if not definition and ref is not None:
        if runtime == "bare":
            raise UsageError(f"{where}: image: {ref} is a container image; --runtime bare would "
                             "run this machine's Python instead",
                             "leave --runtime out, or use `image: host`")  # fmt: skip
        return True
    if runtime == "docker" and ref is None:
        raise UsageError("--runtime docker needs an image: give `image:` a full image name, "
                         "or set GPUJOB_REGISTRY for an image definition")  # fmt: skip
    return runtime == "docker"


def placed_at(dst: str, job_dir: str, in_container: bool, where: str) -> str:
    """Where a file_mounts destination is put on this machine, inside the job's folder; an
    absolute one outside it under the bare runtime is refused in one line (`where`: the
    file:line that wrote it)."""
    if dst.startswith("~/"):
        return f"{job_home(job_dir)}/{dst[2:]}"
    if not dst.startswith("/"):
        return f"{job_dir}/workdir/{dst}"
    if dst == job_dir or dst.startswith(f"{job_dir}/"):
        return dst
    if in_container:
        return f"{job_dir}/{CONTAINER_ROOT}{posixpath.normpath(dst)}"
    raise UsageError(
        f"{where}: file_mounts.{dst}: a job on this machine writes only inside its own folder "
        f"and {dst} is outside it (gpujob never writes over this machine's files); run it on a "
        "host with `--on HOST` or `--up GPU`, in a container (`image:` a container image), or "
        "give a destination under `~/` (the job's own home here) or relative to the workdir"
    )


def sandbox_volumes(dsts: list[str], job_dir: str, cache: str) -> list[str]:
    """A container's `--volume` values: the job's home, the shared cache, and each absolute
    destination from the job's `container-root/` at its own path."""
    volumes = [f"{folder}:{folder}" for folder in (job_home(job_dir), cache) if folder]
    for dst in dsts:
        placed = placed_at(dst, job_dir, True, "")
        if dst.startswith("/") and placed != dst:
            volumes.append(f"{placed}:{posixpath.normpath(dst)}")
    return volumes


def sandbox_env(target: NodeLayout, job_dir: str, venv: str | None) -> dict[str, str]:
    """HOME and the XDG folders inside the job; VIRTUAL_ENV its own venv, if it has one."""
    home = job_home(job_dir)
    env = {
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_STATE_HOME": f"{home}/.local/state",
    }
    if target.shared_cache:
        env["XDG_CACHE_HOME"] = target.shared_cache
    if venv:
        env["VIRTUAL_ENV"] = venv
    return env


def home_step(target: NodeLayout, job_dir: str) -> RunCommand:
    folders = [job_home(job_dir), *[target.shared_cache] * bool(target.shared_cache)]
    return RunCommand(
        argv=("sh", "-c", MAKE_HOME, "sh", *folders),
        why="make the job's own home (its HOME here; ~/sky_workdir is its workdir)",
    )


def venv_step(target: NodeLayout, job_dir: str) -> RunCommand:
    """The job's own venv from the host's python3 (`target.python`); venv writes to stderr,
    streamed as it comes."""
    env = shlex.quote(job_venv(job_dir))
    python = shlex.quote(target.python)
    script = "\n".join(
        [
            "set -euo pipefail",
            f"env={env}",
            'if [ -f "$env/.gpujob-ready" ]; then exit 0; fi',
            'rm -rf "$env"',
            f'{python} -m venv --without-pip --system-site-packages "$env" >&2',
            f'site=$("$env/bin/python" -c {shlex.quote(PURELIB)})',
            f'{python} -c {shlex.quote(HOST_SITES)} >"$site/gpujob-host-python.pth"',
            'if "$env/bin/python" -c "import pip" 2>/dev/null; then',
            "  for name in pip pip3; do",
            f"    printf '#!%s\\n%s' \"$env/bin/python\" {shlex.quote(PIP_SCRIPT)} "
            '>"$env/bin/$name"',
            '    chmod 755 "$env/bin/$name"',
            "  done",
            "else",
            '  "$env/bin/python" -m ensurepip --default-pip >&2 ||',
            f'    echo "[gpujob] the job\'s venv has no pip: no pip nor ensurepip in" {python} >&2',
            "fi",
            'touch "$env/.gpujob-ready"',
        ]
    )
    return RunCommand(
        argv=("bash", "-c", script),
        why=f"make the job's own venv from this machine's {target.python} (its packages seen, "
        "not changed)",
        hint="the host's python3 needs venv (python3-venv); pass PATH with the python3 the "
        "job should use",
    )
