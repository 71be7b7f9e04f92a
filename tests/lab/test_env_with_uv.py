"""uv on a bare lab host, for real: bootstrap's uv step copies this machine's uv over SSH to a
host that has none, and a job's environment is then made there with uv from the host's own
package sources (the lab hosts have no internet: the machine's pip configuration names local
indexes and a wheel folder), and the job runs in it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import SSHHost, gpujob, job_row

pytestmark = pytest.mark.lab
HOST = "uvenv"  # with the lab's prefix: gjlab-uvenv in the default lab
MINI = ("name: mini\nbase: gpujob-lab/base:bookworm\npython: '3.11'\ntorch: 2.13.0\n"
        "cuda: cpu\nrequirements: []\n")  # fmt: skip
"""torch alone (its dependencies resolved by uv): what the lab's local sources hold."""


@pytest.fixture(scope="module")
def bare_host(lab: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHHost]:
    """A lab host with sshd and no dockerd (the bare runtime), and no uv. Its pip finds
    packages where this machine's does (a wheel folder and a local index; PyPI, its default,
    is out of reach: the lab has no internet)."""
    import infra.lab

    try:
        host = infra.lab.create_host(HOST)
        made = SSHHost(host, tmp_path_factory.mktemp("hosts") / "hosts.yaml")
        pip_conf = made.root / ".config" / "pip" / "pip.conf"
        pip_conf.parent.mkdir(parents=True, exist_ok=True)
        pip_conf.write_text("[global]\nfind-links = /opt/wheels\n"
                            "extra-index-url = file:///opt/pypi/simple\n")  # fmt: skip
        made.hosts_file.write_text(
            f"hosts:\n  - {{name: box, address: {host.address}, user: root,"
            f" key: {infra.lab.user_key()}}}\n"
        )
        yield made
    finally:
        infra.lab.destroy_host(HOST)


def test_bootstrap_copies_uv_and_the_job_environment_is_made_with_it(
    tmp_path: Path, bare_host: SSHHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_HOSTS_FILE=str(bare_host.hosts_file))  # fmt: skip
    for name in ("GPUJOB_STATE_DIR", "GPUJOB_HOSTS_FILE"):
        monkeypatch.setenv(name, env[name])
    from launcher.bootstrap.steps import Findings, HostProfile, uv
    from launcher.plan.env_build import UV_HOME_PATH
    from launcher.remote.facts import host_facts
    from launcher.remote.hosts import connect, resolve_host

    assert not (bare_host.root / UV_HOME_PATH).exists()
    conn = connect(resolve_host("box"))
    try:
        found = Findings(host=host_facts(conn, require_python=False))
        step = uv(conn, HostProfile(runtime="bare"), found)
    finally:
        conn.close()
    assert step.status == "fixed", step
    assert (bare_host.root / UV_HOME_PATH).is_file()

    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "prog.py").write_text(
        "import sys, torch\nprint('torch', torch.__version__, 'in', sys.prefix)\n"
    )
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "mini.yaml").write_text(MINI)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: uvenv\nimage: mini\nworkdir: work\n"
                    "run: {launcher: none, entrypoint: prog.py}\n")  # fmt: skip
    done = gpujob(env, "submit", str(spec), "--on", "box", "--job-id", "uvenv-1", timeout=900)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err[-3000:]
    assert "with uv: 1 packages" in err and "no uv on this host" not in err, err[-3000:]
    assert "package index https://pypi.org/simple does not answer here: left out" in err
    assert "Installed 10 packages" in err  # uv's own line (torch and its 9), from the host
    assert "torch 2.13.0" in out and "/.cache/gpujob/envs/mini-" in out, out
    assert job_row(env, "uvenv-1")["state"] == "succeeded"
