"""`ports:` (gpujob's and SkyPilot's `resources.ports`), `port-forward`'s PORT[:LOCAL] and
what a bad one says: one line, exit 2, before any job or host is looked at."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.commands.port_forward import parse_forward
from launcher.spec.load import load_job_spec
from launcher.spec.web import expand_ports


@pytest.mark.parametrize(
    "text, pair",
    [("8080", (8080, 8080)), ("8080:18080", (8080, 18080)), ("1:65535", (1, 65535))],
)
def test_port_and_local_port(text: str, pair: tuple[int, int]) -> None:
    assert parse_forward(text) == pair


@pytest.mark.parametrize(
    "text, said",
    [
        ("web", "PORT 'web' is not a number"),
        ("8080:", "LOCAL '' is not a number"),
        ("0", "PORT 0 is not a TCP port (1 to 65535)"),
        ("8080:70000", "LOCAL 70000 is not a TCP port"),
        ("8o80", "PORT '8o80' is not a number"),
        ("80:80:80", "LOCAL '80:80' is not a number"),
    ],
)
def test_a_bad_port_is_one_line_and_exit_2(gpujob: Callable, text: str, said: str) -> None:
    result = gpujob("port-forward", "no-such-job", text)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"gpujob: error: {text!r}: {said}"), lines[0]
    assert "PORT or PORT:LOCAL" in lines[0]


def test_a_job_that_is_not_there_is_one_line(gpujob: Callable) -> None:
    result = gpujob("port-forward", "no-such-job", "8080")
    assert (result.exit_code, result.stderr.count("\n")) == (2, 1)
    assert "no job `no-such-job`" in result.stderr


@pytest.mark.parametrize(
    "value, ports",
    [
        (8080, [8080]),
        ("8080", [8080]),
        ("8000-8002", [8000, 8001, 8002]),
        ([8080, "9000-9001", 8080], [8080, 9000, 9001]),
        (None, []),
    ],
)
def test_skypilots_forms_of_ports(value: object, ports: list[int]) -> None:
    assert expand_ports(value) == ports


def _task(folder: Path, ports: str) -> Path:
    path = folder / "task.yaml"
    path.write_text(f"name: web\nresources:\n  cpus: 1\n  ports: {ports}\n"
                    "run: |\n  python3 -m http.server 8080\n")  # fmt: skip
    return path


@pytest.mark.parametrize(
    "written, ports",
    [("8080", [8080]), ('"8000-8001"', [8000, 8001]), ("[8080, 8888]", [8080, 8888])],
)
def test_a_skypilot_tasks_ports_are_read(tmp_path: Path, written: str, ports: list[int]) -> None:
    assert load_job_spec(_task(tmp_path, written)).spec.ports == ports


@pytest.mark.parametrize(
    "written, said",
    [
        ('"80a"', "port '80a' is not a number"),
        ('"9000-8000"', "range '9000-8000' ends before it starts"),
        ('"1-1000"', "1000 ports: at most 64 are forwarded"),
        ("[true]", "True is not a port"),
    ],
)
def test_a_bad_ports_field_names_its_line(
    tmp_path: Path, gpujob: Callable, written: str, said: str
) -> None:
    result = gpujob("submit", str(_task(tmp_path, written)), "--dry-run")
    errors = [line for line in result.stderr.splitlines() if line.startswith("gpujob: error:")]
    assert result.exit_code == 2
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"gpujob: error: {tmp_path / 'task.yaml'}:4: ports: {said}")


def test_a_skypilot_task_with_ports_plans(tmp_path: Path, gpujob: Callable) -> None:
    result = gpujob("submit", str(_task(tmp_path, "8080")), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "task.yaml:4: resources.ports -> ports: 8080" in result.stderr


def test_tb_without_a_folder_says_how_to_name_one(gpujob: Callable) -> None:
    result = gpujob("tb", "no-such-job")
    assert (result.exit_code, result.stderr.count("\n")) == (2, 1)


@pytest.mark.parametrize("command", [("port-forward", "on-slurm", "8080"), ("tb", "on-slurm",
                                     "--logdir", "runs")])  # fmt: skip
def test_a_clusters_compute_node_is_one_line_before_any_host_is_contacted(
    gpujob: Callable, command: tuple[str, ...]
) -> None:
    from launcher.remote.hosts import HostEntry
    from launcher.state.db import JobRecord, StateDB

    login = HostEntry("login", "192.0.2.1", 22, "nobody")  # TEST-NET: never answers
    StateDB().add_job(JobRecord(
        id="on-slurm", name="x", spec_path="x.yaml", provider="slurm", runtime="bare",
        hosts=[login.to_record()], node_dirs=["/shared/jobs/on-slurm/node-0"], state="running",
        exit_code=None, created_at=0.0, ended_at=None, last_line=None, scheduler_job="7",
    ))  # fmt: skip
    result = gpujob(*command)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "gpujob: error: job on-slurm runs on a cluster's compute node, behind its login host: "
        "gpujob does not forward a compute node's port yet. forward through the login host "
        "yourself: ssh -L LOCAL:NODE:PORT LOGIN"
    ]


def test_a_port_whose_last_forward_just_ended_is_free_again() -> None:
    """A forward's closed connections stay in TIME_WAIT for a minute; `port-forward` run
    again on the same LOCAL port was refused as taken though nothing listened there."""
    import socket

    from launcher.remote.forward import port_taken

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ssh binds a forward
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    assert port_taken(port)
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the forward's side closes first: its socket waits in TIME_WAIT
    client.close()
    server.close()
    assert not port_taken(port)
