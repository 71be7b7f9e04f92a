"""The rendezvous part of a Plan: node 0's address checked, and the check made before any node
starts, as the literal commands each host runs (shown by a dry run, run by apply).

A firewall or a wrong address otherwise shows as a rendezvous timeout minutes after the
start; here it fails in seconds with nothing started.
"""

from __future__ import annotations

from launcher.errors import UsageError
from launcher.plan.model import NodeLayout, ReachCheck
from launcher.spec.job import JobSpec

LOOPBACK = ("127.", "localhost", "::1")
REACH_TIMEOUT_S = 20

# Holds node 0's rendezvous port open while the others dial it: a bind failure means the
# port is taken (or the address is not this host's, which c10d needs to host the store).
LISTEN = """\
import socket, sys, time
address, port = sys.argv[1], int(sys.argv[2])
expected, timeout = int(sys.argv[3]), float(sys.argv[4])
server = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    server.bind((address, port))
except OSError as err:
    sys.exit(f"cannot listen on {address}:{port}: {err.strerror}")
server.listen(16)
deadline, seen = time.monotonic() + timeout, 0
while seen < expected and time.monotonic() < deadline:
    server.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        server.accept()[0].close()
        seen += 1
    except OSError:
        pass
print(seen)
"""
DIAL = """\
import socket, sys, time
address, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline, error = time.monotonic() + timeout, None
while time.monotonic() < deadline:
    try:
        socket.create_connection((address, port), timeout=3).close()
        sys.exit(0)
    except OSError as err:
        error = err
        time.sleep(0.2)
sys.exit(f"cannot reach {address}:{port}: {error}")
"""


def check_rendezvous(spec: JobSpec, target: NodeLayout) -> None:
    if spec.nodes == 1 or target.one_machine:
        return
    head = target.addresses[0]
    if head.startswith(LOOPBACK):
        raise UsageError(
            f"nodes: {spec.nodes} across several hosts, but node 0's address is {head}, a "
            "loopback address the other nodes cannot reach",
            "give node 0 a routable address (its provider's IP) so the rendezvous can form",
        )


def rendezvous_port(spec: JobSpec) -> int:
    """The port the other nodes dial on node 0: Ray's head port for a Ray cluster (its
    workers join there; rdzv_port is only MASTER_PORT for the driver), else rdzv_port."""
    return spec.run.ray_port if spec.run.launcher_name == "ray" else spec.run.rdzv_port


def reach_checks(spec: JobSpec, target: NodeLayout) -> tuple[ReachCheck, ...]:
    """One check where node 0 shares its host with no other node's: every other host dials
    (the same argv on each) while node 0's host listens for that many connections."""
    others = tuple(h for h in target.distinct_hosts if h != target.hosts[0])
    if spec.nodes == 1 or not others:
        return ()
    address, port = target.addresses[0], rendezvous_port(spec)
    listen = ("python3", "-c", LISTEN, address, str(port), str(len(others)), str(REACH_TIMEOUT_S))
    dial = ("python3", "-c", DIAL, address, str(port), str(REACH_TIMEOUT_S - 5))
    return (
        ReachCheck(
            host=target.hosts[0],
            address=address,
            port=port,
            from_hosts=others,
            listen=listen,
            dial=dial,
            timeout_s=REACH_TIMEOUT_S,
            port_field="run.ray_port" if spec.run.launcher_name == "ray" else "run.rdzv_port",
        ),
    )
