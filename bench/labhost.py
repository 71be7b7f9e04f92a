"""A ready lab host for the remote-job benches: its own dockerd with the job image pulled, a
hosts.yaml naming it, and the real OpenSSH client as the baseline's transport.

Needs root and the lab up (`gpujob lab up --hosts 0`); takes the machine's lab lock so no
test session cycles the lab under the bench, and removes the host at the end.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFINITIONS = REPO / "launcher" / "images" / "definitions"
GPUJOB = str(Path(sys.executable).with_name("gpujob"))  # the venv running the bench
NAME = "bench"  # with the lab's prefix: gjlab-bench in the default lab


@dataclass(frozen=True)
class BenchHost:
    address: str
    image: str
    env: dict[str, str]
    folder: Path

    port: int | None = None
    """Set when the host is reached through a local port (`far_away`) rather than directly."""

    def ssh(self, command: str, control: Path | None = None) -> list[str]:
        """The OpenSSH client, key and pin as gpujob has them: one connection per call, or
        with `control` the connection kept open there (ControlPersist), as gpujob keeps its."""
        from infra.lab import known_hosts_path, user_key

        where = ["-p", str(self.port), "-o", f"HostKeyAlias={self.address}", "root@127.0.0.1"]
        kept = ["-o", "ControlMaster=auto", "-o", f"ControlPath={control}",
                "-o", "ControlPersist=120"] if control else []  # fmt: skip
        return ["ssh", "-i", str(user_key()), "-o", f"UserKnownHostsFile={known_hosts_path()}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", *kept,
                *(where if self.port else [f"root@{self.address}"]), command]  # fmt: skip

    @contextmanager
    def far_away(self, one_way_ms: float) -> Iterator[BenchHost]:
        """This host behind a proxy that adds `one_way_ms` each way (hosts.yaml's `bench`
        goes through it too, for the rest of the block)."""
        from delay_proxy import delay_proxy

        from infra.lab import user_key

        hosts = self.folder / "hosts.yaml"
        direct = hosts.read_text()
        with delay_proxy(self.address, 22, one_way_ms) as port:
            hosts.write_text(f"hosts:\n  - {{name: bench, address: 127.0.0.1, port: {port},"
                             f" user: root, key: {user_key()}}}\n")  # fmt: skip
            try:
                yield replace(self, port=port)
            finally:
                hosts.write_text(direct)

    def gpujob(self, *args: str, **kwargs: object) -> subprocess.CompletedProcess:
        return subprocess.run([GPUJOB, *args], env=self.env, capture_output=True, **kwargs)  # type: ignore[call-overload]


@contextmanager
def bench_host() -> Iterator[BenchHost]:
    sys.path.insert(0, str(REPO))
    import infra.lab
    from infra.lab import job_image, naming, registry, state

    if not state.alive(state.read_state()["daemons"].get("registry")):
        sys.exit("the lab is not up: `gpujob lab up --hosts 0` first")
    with naming.session_lock().open("a") as lock:  # the lab tests': one user at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        ref = job_image.build(report=lambda line: print(f"lab: {line}", file=sys.stderr))
        host = infra.lab.create_host(NAME, docker=True)
        try:
            pulled = subprocess.run(["docker", "-H", str(host.docker_host), "pull", "-q", ref],
                                    capture_output=True, text=True)  # fmt: skip
            if pulled.returncode != 0:
                sys.exit(f"pull failed: {pulled.stderr}")
            with tempfile.TemporaryDirectory(prefix="gjbench-") as tmp:
                folder = Path(tmp)
                (folder / "hosts.yaml").write_text(
                    f"hosts:\n  - {{name: bench, address: {host.address}, user: root,"
                    f" key: {infra.lab.user_key()}}}\n"
                )
                env = dict(
                    os.environ,
                    GPUJOB_STATE_DIR=str(folder / "state"),
                    GPUJOB_HOSTS_FILE=str(folder / "hosts.yaml"),
                    GPUJOB_REGISTRY=registry.address(),
                    GPUJOB_IMAGE_REPO="gpujob-lab/job",
                )
                try:
                    yield BenchHost(host.address, ref, env, folder)
                finally:
                    from launcher.remote.openssh import close_state as close

                    close(folder / "state")
        finally:
            infra.lab.destroy_host(NAME)


def write_job(folder: Path, program: str, name: str = "bench", args: tuple[str, ...] = ()) -> Path:
    work = folder / "work"
    work.mkdir(exist_ok=True)
    (work / "prog.py").write_text(program)
    images = folder / "images"
    images.mkdir(exist_ok=True)
    (images / "lab-cpu.yaml").write_text((DEFINITIONS / "lab-cpu.yaml").read_text())
    spec = folder / f"{name}.yaml"
    spec.write_text(f"name: {name}\nimage: lab-cpu\nworkdir: work\nrun:\n  entrypoint: prog.py\n"
                    f"  nproc_per_node: 1\n  args: {list(args)}\n")  # fmt: skip
    return spec
