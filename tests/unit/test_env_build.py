"""The job environment script, run for real on this machine: with uv where it finds one,
with venv and pip (said once) where it does not, from the sources the host's pip.conf names,
and only once per pin set. The wheel is made here, so nothing is downloaded."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from launcher.plan.env_build import env_script

UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
BASE_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin")


def tiny_wheel(folder: Path, name: str = "gjtiny", version: str = "1.0") -> Path:
    """A pure-Python wheel with one module that says its version."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        for path, text in {**files, f"{dist}/RECORD": "\n".join(record) + "\n"}.items():
            out.writestr(path, text)
    return wheel


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    """A host's environment: a HOME whose pip.conf names only a wheelhouse (no index), a PATH
    without uv, no PIP_*/UV_* variables of this machine."""
    tiny_wheel(tmp_path / "wheels")
    conf = tmp_path / "home" / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"[global]\nno-index = true\nfind-links = {tmp_path / 'wheels'}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL"))}
    path = [p for p in env["PATH"].split(":") if not (Path(p) / "uv").exists()]
    env.update(HOME=str(tmp_path / "home"), PATH=":".join(path), PIP_CONFIG_FILE=str(conf),
               UV_CACHE_DIR=str(tmp_path / "uv-cache"),
               XDG_CONFIG_DIRS=str(tmp_path / "none"))  # fmt: skip
    return env


def make_env(tmp_path: Path, env: dict[str, str], pins: str = "gjtiny==1.0"):
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(pins + "\n")
    script = env_script(str(tmp_path / "envs" / "e"), str(BASE_PYTHON), str(reqs), 1)
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def imports(tmp_path: Path) -> str:
    python = tmp_path / "envs" / "e" / "bin" / "python"
    done = subprocess.run([str(python), "-c", "import gjtiny; print(gjtiny.VERSION)"],
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip()


def test_uv_makes_the_environment_from_the_hosts_pip_sources(
    tmp_path: Path, host: dict[str, str]
) -> None:
    assert UV is not None, "uv is one of gpujob's dependencies"
    done = make_env(tmp_path, {**host, "GPUJOB_UV": UV})
    assert done.returncode == 0, done.stderr
    assert "with uv: 1 packages" in done.stderr
    assert "+ gjtiny==1.0" in done.stderr  # uv's own line: what it installed
    assert "no uv" not in done.stderr
    assert imports(tmp_path) == "1.0"
    again = make_env(tmp_path, {**host, "GPUJOB_UV": UV})
    assert again.returncode == 0 and again.stderr == ""  # made once per pin set


def test_uv_in_home_local_bin_is_found_as_gpujob_up_leaves_it(
    tmp_path: Path, host: dict[str, str]
) -> None:
    assert UV is not None
    copied = Path(host["HOME"]) / ".local" / "bin" / "uv"
    copied.parent.mkdir(parents=True)
    shutil.copy(UV, copied)
    done = make_env(tmp_path, host)
    assert done.returncode == 0, done.stderr
    assert "with uv: 1 packages" in done.stderr and imports(tmp_path) == "1.0"


def test_without_uv_pip_makes_it_and_says_so_once(tmp_path: Path, host: dict[str, str]) -> None:
    done = make_env(tmp_path, host)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("no uv on this host") == 1
    assert "with pip: 1 packages" in done.stderr
    assert "Successfully installed gjtiny-1.0" in done.stderr  # pip's own line
    assert imports(tmp_path) == "1.0"


def test_a_pin_uv_cannot_find_fails_with_uvs_words_naming_it(
    tmp_path: Path, host: dict[str, str]
) -> None:
    assert UV is not None
    done = make_env(tmp_path, {**host, "GPUJOB_UV": UV}, pins="gjtiny==9.9.9")
    assert done.returncode != 0
    assert "gjtiny==9.9.9" in done.stderr, done.stderr
    assert not (tmp_path / "envs" / "e" / ".gpujob-ready").exists()


def test_an_index_that_does_not_answer_is_left_out_as_pip_skips_it(
    tmp_path: Path, host: dict[str, str]
) -> None:
    """An offline host whose pip keeps an index it cannot reach (PyPI, say) beside a
    wheelhouse: pip skips the index after its retries, and uv must not stop at it."""
    assert UV is not None
    with socket.socket() as sock:  # a port nothing listens on: connections are refused
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    conf = Path(host["PIP_CONFIG_FILE"])
    conf.write_text(f"[global]\nindex-url = http://127.0.0.1:{closed}/simple\n"
                    f"find-links = {tmp_path / 'wheels'}\n")  # fmt: skip
    done = make_env(tmp_path, {**host, "GPUJOB_UV": UV})
    assert done.returncode == 0, done.stderr
    assert "package index http://127.0.0.1/simple does not answer here: left out" in done.stderr
    assert imports(tmp_path) == "1.0"


def test_the_script_lets_go_of_its_output_when_it_ends(
    tmp_path: Path, host: dict[str, str]
) -> None:
    """Its output reaches its end with the script, as an SSH command's channel must: the
    heartbeat's sleep (5 s a beat) holds none of it, so the reader is not kept waiting."""
    import select

    assert UV is not None
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("gjtiny==1.0\n")
    script = env_script(str(tmp_path / "envs" / "e"), str(BASE_PYTHON), str(reqs), 1)
    proc = subprocess.Popen(["bash", "-c", script], env={**host, "GPUJOB_UV": UV},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.wait(timeout=300) == 0
    assert proc.stderr is not None
    said = b""
    while select.select([proc.stderr], [], [], 2.0)[0]:  # a beat is 5 s away
        chunk = os.read(proc.stderr.fileno(), 65536)
        if not chunk:
            break
        said += chunk
    else:
        pytest.fail(f"the script ended and its stderr is still held open: {said[-500:]!r}")
    assert b"with uv: 1 packages" in said
