"""A containered job's port, reached from here: the container runs with the host's network,
so `gpujob port-forward` forwards the host's port and the page served inside the container
answers; `gpujob tb` checks for tensorboard inside the container (the lab's job image has
none: one line says how to add it)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from labtools import (
    free_port,
    get,
    gpujob,
    listening,
    page_or_empty,
    start_forward,
    stop,
    wait_until,
)

pytestmark = pytest.mark.lab

DEFINITIONS = Path(__file__).resolve().parents[2] / "launcher" / "images" / "definitions"
SERVER = """
import functools, http.server, os
os.makedirs("site", exist_ok=True)
with open("site/index.html", "w") as page:
    page.write("served from a container\\n")
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory="site")
print("in container:", os.path.exists("/.dockerenv"), flush=True)
http.server.ThreadingHTTPServer(("127.0.0.1", PORT), handler).serve_forever()
"""


@pytest.fixture
def env(tmp_path: Path, docker_hosts: tuple) -> dict[str, str]:
    """One of the session's docker hosts in a hosts.yaml (the job image in the registry)."""
    import infra.lab
    from infra.lab import job_image, registry

    job_image.build(report=lambda line: print(f"lab: {line}"))
    hosts_file = tmp_path / "hosts.yaml"
    hosts_file.write_text(f"hosts:\n  - {{name: ta, address: {docker_hosts[0].address}, "
                          f"user: root, key: {infra.lab.user_key()}}}\n")  # fmt: skip
    return dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
                GPUJOB_HOSTS_FILE=str(hosts_file), GPUJOB_REGISTRY=registry.address(),
                GPUJOB_IMAGE_REPO="gpujob-lab/job")  # fmt: skip


def test_a_containered_jobs_port_is_forwarded_and_tb_looks_inside_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    port, local = 18090, free_port()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "serve.py").write_text(SERVER.replace("PORT", str(port)))
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "lab-cpu.yaml").write_text((DEFINITIONS / "lab-cpu.yaml").read_text())
    (tmp_path / "job.yaml").write_text(
        f"name: served\nimage: lab-cpu\nworkdir: work\nports: {port}\nrun:\n"
        "  entrypoint: serve.py\n  nproc_per_node: 1\n"
    )
    started = gpujob(env, "submit", str(tmp_path / "job.yaml"), "--on", "ta", "--runtime",
                     "docker", "--detach", "--job-id", "served")  # fmt: skip
    assert started.returncode == 0, started.stderr.decode()[-3000:]
    try:
        proc, _ = start_forward(env, None, "port-forward", "served", f"{port}:{local}")
        url = f"http://127.0.0.1:{local}/"
        wait_until(lambda: listening(local) and page_or_empty(url) != b"", "the container's server")
        assert get(url) == b"served from a container\n"
        assert stop(proc, signal.SIGINT) == 130

        tb = gpujob(env, "tb", "served", "--logdir", "runs")
        assert tb.returncode == 1
        assert tb.stderr.decode().startswith("gpujob: error: tensorboard is not installed in job "
                                    "served's environment. add `tensorboard` to its image's "
                                    "requirements"), tb.stderr  # fmt: skip
    finally:
        assert gpujob(env, "cancel", "served", "--grace", "2").returncode == 0
