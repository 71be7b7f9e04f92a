"""Reading real local indexes: a find-links folder and a file:// PEP 503 index with wheels
written here, as pip's configuration on this machine points at (/opt/wheels, /opt/pypi)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from launcher.images.index import Sources, offered


def make_wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {line}\n" for line in requires)
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return path


def test_find_links_folder_gives_hash_and_requirements_of_the_pinned_file(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    make_wheel(links, "demo", "1.0", ["other>=2"])
    pinned = make_wheel(links, "demo", "2.0", ["other>=3; python_version >= '3.10'"])
    found = offered([("demo", "2.0")], Sources((str(links),), ()), "3.11", "2.28")
    by_version = {r.version: r for r in found["demo"]}
    assert set(by_version) == {"1.0", "2.0"}
    assert by_version["2.0"].sha256 == hashlib.sha256(pinned.read_bytes()).hexdigest()
    assert by_version["2.0"].requires == ("other>=3; python_version >= '3.10'",)
    assert by_version["1.0"].requires is None  # only the pinned version's file is read


def test_file_index_takes_the_hash_the_index_states(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    wheel = make_wheel(files, "demo", "1.0", [])
    stated = "ab" * 32
    page = tmp_path / "simple" / "demo"
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text(
        f'<a href="../../files/{wheel.name}#sha256={stated}">{wheel.name}</a>\n'
    )
    found = offered(
        [("demo", "1.0")], Sources((), ((tmp_path / "simple").as_uri(),)), "3.11", "2.28"
    )
    [record] = found["demo"]
    assert record.sha256 == stated  # the index's word; the wheelhouse checks the bytes later
    assert record.url == wheel.as_uri()
    assert record.requires == ()


def test_a_missing_project_is_no_wheels_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "simple").mkdir()
    found = offered(
        [("absent", "1.0")], Sources((), ((tmp_path / "simple").as_uri(),)), "3.11", "2.28"
    )
    assert found == {"absent": []}
