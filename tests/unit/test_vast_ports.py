"""A job's `ports:` on Vast: asked of Vast when the instance is created (`"-p P:P": "1"` in
the create request's `env`, as vast-cli and SkyPilot ask), read back from the instance's
`ports` mapping, and said at its public URL by `submit`, `status` and `port-forward`.
Against the Vast fake on a thread; its request log says what was asked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clouds import calls, vast_instances

from infra.fakes import RunningFake


def test_submit_up_asks_vast_to_publish_the_jobs_ports(
    clouds: dict[str, RunningFake], gpujob: Callable, tmp_path: Path
) -> None:
    vast = clouds["vast"]
    said = "error 400/3467: Invalid args: stopped here by the test"
    vast.control.fault(op="create_instance", status=400, code="invalid_args", message=said)
    (tmp_path / "work").mkdir()
    spec = tmp_path / "task.yaml"
    spec.write_text(
        f"name: web\nworkdir: {tmp_path / 'work'}\n"
        "resources:\n  ports: [8000, '9000-9001']\nrun: python3 -m http.server\n"
    )
    result = gpujob("submit", str(spec), "--up", "a100", "--provider", "vast", "--allow-cpu")
    assert result.exit_code == 1 and "stopped here by the test" in result.stderr, result.stderr
    (create,) = calls(vast, "create_instance")
    asked = {key: value for key, value in create["body"]["env"].items() if key.startswith("-p")}
    assert asked == {"-p 8000:8000": "1", "-p 9000:9000": "1", "-p 9001:9001": "1"}
    assert vast_instances(vast) == []


def test_a_running_instance_publishes_its_ports_at_the_mapped_address(
    vast_fake: RunningFake,
) -> None:
    from launcher.clouds.base import parse_gpu_request
    from launcher.clouds.vast import Vast

    vast = Vast()
    vast.publish_ports([8000])
    offer = vast.offers(parse_gpu_request("rtx4090"))[0]
    made = vast.launch(offer, "gpujob-0000abcd-web-000001", "ssh-ed25519 AAAAC3Nza test")
    try:
        inst = vast.wait_until_running(made.id, 30)
        shown = next(i for i in vast_instances(vast_fake) if str(i["id"]) == made.id)
        mapped = shown["ports"]["8000/tcp"][0]["HostPort"]
        assert inst.public == {8000: f"{inst.ip}:{mapped}"}
    finally:
        vast.terminate(made.id)


def test_the_public_url_is_the_mappings_not_the_port() -> None:
    """Vast maps a port to another number of the machine's shared address (reference §7.1);
    the URL is the host port Vast answered, its stray whitespace gone."""
    from launcher.clouds.vast_ports import public_ports

    raw = {"public_ipaddr": "203.0.113.7 ", "ports": {
        "22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "40012"}],
        "8000/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41234"}],
        "8082/udp": [{"HostIp": "0.0.0.0", "HostPort": "41235"}]}}  # fmt: skip
    assert public_ports(raw) == {8000: "203.0.113.7:41234"}
    assert public_ports({"public_ipaddr": "203.0.113.7", "ports": None}) == {}


def test_status_and_port_forward_say_the_public_url(
    gpujob: Callable, state_dir: Path, tmp_path: Path
) -> None:
    from launcher.jobs.served import record_served
    from launcher.spec.load import load_job_spec
    from launcher.state.served import ServedDB

    spec = tmp_path / "task.yaml"
    spec.write_text("name: web\nresources:\n  ports: [8000, 8001]\nrun: echo\n")
    ServedDB().put_public("web-1", {8000: "203.0.113.7:41234"})
    lines = record_served("web-1", load_job_spec(spec, []).spec, on_this_machine=False)
    assert "http://203.0.113.7:41234/  <- port 8000 of job web-1, published by its cloud" in lines
    assert not any("8001, published" in line for line in lines)  # Vast mapped no 8001
    ServedDB().put_public("web-1", {8001: "198.51.100.2:40001"})  # a replacement head node
    assert ServedDB().get("web-1").public == {8001: "198.51.100.2:40001"}  # type: ignore[union-attr]


def test_port_forward_says_the_published_url_before_it_forwards(gpujob: Callable) -> None:
    """Before it forwards (here the host greets like sshd and hangs up), `port-forward`
    says where the cloud publishes the port."""
    from clouds import BannerServer

    from launcher.remote.hosts import HostEntry
    from launcher.state.db import JobRecord, StateDB
    from launcher.state.served import Served, ServedDB

    banner = BannerServer()
    host = HostEntry("gpujob-0000abcd-rtx4090-000001", "127.0.0.1", banner.port, "root")
    StateDB().add_job(JobRecord(
        id="web-1", name="web", spec_path="x.yaml", provider="vast", runtime="bare",
        hosts=[host.to_record()], node_dirs=["/root/.gpujob/jobs/web-1/node-0"],
        state="running", exit_code=None, created_at=0.0, ended_at=None, last_line=None,
    ))  # fmt: skip
    ServedDB().put(Served("web-1", [8000]))
    ServedDB().put_public("web-1", {8000: "203.0.113.7:41234"})
    try:
        result = gpujob("port-forward", "web-1")
    finally:
        banner.close()
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == (
        "http://203.0.113.7:41234/  <- port 8000 of job web-1, published by its cloud"
    ), result.stdout + result.stderr
