"""Fixtures that start the lab's real parts once per session and remove them by their ids.

Each test session works on a lab of its own name (infra.lab.naming), so two sessions on one
machine (two checkouts, CI beside a demo) never meet: unless `GPUJOB_LAB_NAME` names one,
the session takes the first of `gjt1`, `gjt2`, ... whose lock no other session holds, and
holds it to the end. (Every lab of the machine shares one registry storage and one image
store, infra.lab.naming.shared_dir, so a lab pushes and pulls only what no lab did.) A lab
that was already up when the session began is reused, and left up where GPUJOB_LAB_NAME
named it (a developer's); a lab this session started, or found up under a slot it took
itself (a killed session's), is taken down at the end, failed tests or not. Under
pytest-xdist (`make test` runs `-n 2`) each worker is a session, with a lab of its own.
The tests that cycle a whole lab through the real CLI (`test_up_down.py`, the SLURM cluster's
up and down) work on a lab named after the session's (`lab_of_its_own`), so they run in any
order beside the tests that hold the session's lab up.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from labtools import GPUJOB, docker, lab_is_up, lab_missing, pin_line
from slurmlab import slurm_cluster  # noqa: F401 (one cluster per session, every module)

SLOTS = 32
"""Lab names a test session may take, `gjt1` to `gjt32`: more than ever run at once."""
PICKED: list[str] = []
"""The slot this session took itself (no GPUJOB_LAB_NAME given): whatever of that lab is up
is the debris of a killed session (an xdist run stopped with Ctrl-C), so this session takes
it down at its end too."""


@pytest.fixture(scope="session", autouse=True)
def one_lab_session_at_a_time() -> Iterator[None]:
    """This session's lab, by name (GPUJOB_LAB_NAME for the session and every process it
    starts), and that lab's lock: a session that names a lab another session is using waits
    here rather than tearing down or reusing hosts of that lab."""
    from infra.lab import naming

    chosen = os.environ.get(naming.VARIABLE)
    with pytest.MonkeyPatch.context() as patch:
        for slot in [chosen] if chosen else [f"gjt{n}" for n in range(1, SLOTS + 1)]:
            patch.setenv(naming.VARIABLE, slot)
            handle = naming.session_lock().open("a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not chosen:
                    handle.close()
                    continue
                print(f"lab: another test session holds {naming.session_lock()}; waiting for it")
                fcntl.flock(handle, fcntl.LOCK_EX)
                break
        else:
            pytest.fail(f"lab: all {SLOTS} test lab names are in use on this machine")
        if not chosen:
            PICKED.append(naming.name())
        with handle:
            print(f"lab: this session's lab is {naming.name()} (GPUJOB_LAB_NAME)")
            yield


@pytest.fixture
def lab_of_its_own(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A lab for one test that takes a whole lab up and down: named after the session's
    (`gjt1` -> `gjt1c`), so no other session or worker has it. What a killed session left of
    it is taken down first; its folder is removed after, so cycles do not fill the disk."""
    reason = lab_missing()
    if reason:
        pytest.skip(reason)
    from infra.lab import naming, network

    name = f"{naming.name()[:11]}c"
    monkeypatch.setenv(naming.VARIABLE, name)

    def down() -> None:
        if lab_is_up() or network.lab_namespaces():
            subprocess.run([GPUJOB, "lab", "down"], capture_output=True, timeout=300)

    down()
    yield name
    down()
    shutil.rmtree(naming.lab_dir(), ignore_errors=True)


@pytest.fixture(scope="session")
def lab() -> Iterator[None]:
    """Bridge, registry, S3 and base image, with no static hosts (tests make their own)."""
    reason = lab_missing()
    if reason:
        pytest.skip(reason)
    import infra.lab

    started = bool(PICKED) or not lab_is_up()
    infra.lab.up(hosts=0, report=lambda line: print(f"lab: {line}"))
    try:
        yield
    finally:
        if started:
            infra.lab.down(report=lambda line: print(f"lab: {line}"))


@pytest.fixture(scope="session")
def docker_hosts(lab: None) -> Iterator[tuple]:
    """Two hosts with their own dockerd, the base image already pulled from the registry."""
    import infra.lab
    from infra.lab import base_image, registry

    names = ["ta", "tb"]  # with the lab's prefix
    try:
        made = [infra.lab.create_host(name, docker=True) for name in names]
        image = f"{registry.address()}/{base_image.TAG}"
        with ThreadPoolExecutor(2) as pool:
            pulls = list(pool.map(lambda h: docker(h, "pull", "-q", image), made))
        for done in pulls:
            assert done.returncode == 0, done.stderr
        yield tuple(made)
    finally:
        for name in names:
            infra.lab.destroy_host(name)


@pytest.fixture(scope="session")
def known_hosts(tmp_path_factory: pytest.TempPathFactory, docker_hosts: tuple) -> Path:
    """A known_hosts file written by the test from the hosts' public keys, for pinning."""
    path = tmp_path_factory.mktemp("ssh") / "known_hosts"
    path.write_text("".join(pin_line(host) for host in docker_hosts))
    return path
