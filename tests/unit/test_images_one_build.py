"""One `image build` of a tag at a time on a machine (docker_build._one_build_of): a second
one waits for the first and says so, then looks the tag up again (and finds it cached)."""

from __future__ import annotations

import threading
from pathlib import Path

from launcher.images.docker_build import _one_build_of


def test_a_second_build_of_a_tag_waits_for_the_first(tmp_path: Path) -> None:
    said: list[str] = []
    order: list[str] = []
    first_in, release = threading.Event(), threading.Event()

    def first() -> None:
        with _one_build_of("gpujob/lab-cpu:abc", tmp_path, said.append):
            first_in.set()
            release.wait(10)
            order.append("first done")

    def second() -> None:
        with _one_build_of("gpujob/lab-cpu:abc", tmp_path, said.append):
            order.append("second in")

    one = threading.Thread(target=first)
    one.start()
    assert first_in.wait(10)
    two = threading.Thread(target=second)
    two.start()
    two.join(0.5)
    assert two.is_alive() and order == []  # waiting on the first build
    release.set()
    one.join(10)
    two.join(10)
    assert order == ["first done", "second in"]
    assert said == ["gpujob/lab-cpu:abc: another gpujob is building it on this machine; waiting "
                    "for it"]  # fmt: skip
    with (  # another tag: no wait
        _one_build_of("gpujob/other:1", tmp_path, said.append),
        _one_build_of("gpujob/lab-cpu:abc", tmp_path, said.append),
    ):
        pass
    assert len(said) == 1
