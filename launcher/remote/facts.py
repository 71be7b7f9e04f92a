"""A host's facts, read in one command: what a plan needs and cannot guess ($HOME, its
python3, whether Docker answers and which images it has, its GPUs, whether it may lift
RLIMIT_MEMLOCK, the free disk where jobs go), and what bootstrap reports (OS, arch, user,
GPU names and driver, /dev/shm). Every part of gpujob that asks a host about itself asks
through `host_facts`.
"""

from __future__ import annotations

from launcher.errors import GpujobError
from launcher.plan.model import HostFacts
from launcher.remote.base import Connection

# The image's own environment when the host is itself a container (a Vast instance is one),
# which an SSH login does not inherit: the first python3 that has torch, on PID 1's PATH (the
# image's ENV; unreadable when PID 1 is sshd, which rewrites it for its title) or in the
# usual image locations.
FACTS_SCRIPT = r"""
HAS_TORCH='import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'
echo "home=$HOME"
echo "arch=$(uname -m)"
echo "user=$(id -un)"
echo "os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -s)"
if [ -f /.dockerenv ]; then
  image_path=$({ tr '\0' '\n' </proc/1/environ; } 2>/dev/null | sed -n 's/^PATH=//p')
  for dir in $(echo "$image_path" | tr ':' ' ') /opt/conda/bin /opt/venv/bin /usr/local/bin; do
    if [ -x "$dir/python3" ] && "$dir/python3" -c "$HAS_TORCH" 2>/dev/null; then
      PATH="$dir:$PATH"
      break
    fi
  done
fi
images=$(mktemp 2>/dev/null) || images=/dev/null  # no list then: the pull check stays
if command -v docker >/dev/null 2>&1; then
  docker image ls --format '{{.Repository}}:{{.Tag}}' >"$images" 2>/dev/null &
fi
py=$(command -v python3 || true)
echo "python=$py"
if [ -n "$py" ]; then
  echo "version=$("$py" -c 'import sys; print(*sys.version_info[:2], sep=".")')"
fi
if wait $! 2>/dev/null && command -v docker >/dev/null 2>&1; then
  echo docker=1
  sed 's/^/image=/' "$images"
else
  echo docker=0
fi
[ "$images" = /dev/null ] || rm -f "$images"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu=/'
echo "shm_kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $2}')"
echo "memlock=$(ulimit -Hl)"
at="$HOME/.gpujob/jobs"
while [ ! -e "$at" ]; do at=$(dirname "$at"); done
echo "free_at=$at"
echo "free_kib=$(df -Pk "$at" 2>/dev/null | awk 'NR == 2 {print $4}')"
"""


def host_facts(conn: Connection, *, require_python: bool = True) -> HostFacts:
    """The facts, or a one-line error; a host without python3 is an error unless the caller
    reports it itself (bootstrap's system step does, with how to fix it)."""
    result = conn.run(["sh", "-c", FACTS_SCRIPT])
    lines = [line.split("=", 1) for line in result.stdout.splitlines() if "=" in line]
    facts = {key: value.strip() for key, value in lines}
    if not result.ok or "home" not in facts or (require_python and not facts.get("version")):
        raise GpujobError(
            f"{conn.host}: cannot read the host's facts (exit {result.exit_code}): "
            f"{result.stderr.strip()[-200:]}",
            "the host needs python3 on its PATH (the agent runs with it)",
        )
    gpus = [value.rsplit(",", 1) for key, value in lines if key == "gpu"]
    return HostFacts(
        home=facts["home"],
        python=facts.get("python", ""),
        version=facts.get("version", ""),
        docker=facts.get("docker") == "1",
        gpus=len(gpus),
        memlock_unlimited=facts.get("memlock", "unlimited") == "unlimited",
        free_bytes=_kib(facts.get("free_kib")),
        free_at=facts.get("free_at", ""),
        images=frozenset(value.strip() for key, value in lines if key == "image"),
        arch=facts.get("arch", ""),
        user=facts.get("user", ""),
        os_name=facts.get("os", ""),
        gpu_names=tuple(name.strip() for name, *_ in gpus),
        driver=gpus[0][-1].strip() if gpus and len(gpus[0]) == 2 else None,
        shm_bytes=_kib(facts.get("shm_kib")),
    )


def _kib(text: str | None) -> int | None:
    return int(text) * 1024 if text and text.isdigit() else None
