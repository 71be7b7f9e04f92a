"""A port of a job's node reached from this machine: over the node's own SSH connection
(ssh and rented hosts; a containered job's ports are the host's, its network being the
host's), said directly where the job runs here, and one line where gpujob cannot reach it
(a cluster's compute node, behind its login host)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from launcher.errors import GpujobError, UsageError
from launcher.state.db import JobRecord
from launcher.targets.base import Node, Target, close_all

Show = Callable[[str], None]


def node_of(job: JobRecord, target: Target, rank: int) -> Node:
    """Node `rank` of the job (its connection not opened yet; the others closed)."""
    nodes = target.nodes(job)
    if not 0 <= rank < len(nodes):
        close_all([node.connection for node in nodes])
        raise UsageError(f"--node {rank}: job {job.id} has node(s) 0 to {len(nodes) - 1}",
                         "leave out --node for node 0")  # fmt: skip
    close_all([node.connection for node in nodes if node.rank != rank])
    return nodes[rank]


def refuse_unreachable(job: JobRecord, target: Target) -> None:
    """One line, before any host is contacted, where a node's port is not gpujob's to reach."""
    if not target.traits.forwards_ports:
        raise GpujobError(
            f"job {job.id} runs on a cluster's compute node, behind its login host: gpujob "
            "does not forward a compute node's port yet",
            "forward through the login host yourself: ssh -L LOCAL:NODE:PORT LOGIN",
        )


def forward_job(
    job: JobRecord, target: Target, pairs: list[tuple[int, int]], rank: int, show: Show
) -> int:
    """Each (PORT, LOCAL) of node `rank` on 127.0.0.1:LOCAL until a signal ends the command
    (its exit code: 128 + the signal's number); at once where the job runs here."""
    from launcher.remote.forward import forward
    from launcher.remote.ssh import SSHConnection

    if target.traits.on_this_machine:
        for remote, _ in pairs:
            show(f"http://127.0.0.1:{remote}/  (job {job.id} runs on this machine: its port "
                 "is this machine's own, nothing to forward)")  # fmt: skip
        return 0
    refuse_unreachable(job, target)
    conn = node_of(job, target, rank).connection
    assert isinstance(conn, SSHConnection)  # every target that forwards_ports reaches it so
    try:
        conn.connect()  # the pin checked and an unreachable host said in gpujob's one line

        def ready() -> None:
            for remote, local in pairs:
                show(f"http://127.0.0.1:{local}/  <- port {remote} of job {job.id}'s node "
                     f"{rank} ({conn.host})")  # fmt: skip
            show("forwarding until Ctrl-C")

        return forward(conn.client, pairs, ready)
    finally:
        conn.close()


@contextmanager
def forwarded_while(job: JobRecord, target: Target, ports: list[int], show: Show) -> Iterator[None]:
    """`submit` following its job: each port of node 0 forwarded here while the block runs
    (the same port here, or a free one where it is taken), the local URLs said once. Where
    the job runs here its ports are this machine's (launch said them); a forward that cannot
    start is a warning, never the job's failure."""
    from launcher.remote.forward import forwarding, free_local_port
    from launcher.remote.ssh import SSHConnection

    with ExitStack() as stack:
        if ports and not target.traits.on_this_machine:
            try:
                refuse_unreachable(job, target)
                conn = node_of(job, target, 0).connection
                assert isinstance(conn, SSHConnection)
                stack.callback(conn.close)
                conn.connect()
                pairs = [(port, free_local_port(port)) for port in ports]
                stack.enter_context(forwarding(conn.client, pairs))
            except GpujobError as err:
                show(f"warning: job {job.id}'s ports are not forwarded: {err.one_line()}; "
                     f"`gpujob port-forward {job.id}` tries again")  # fmt: skip
            else:
                for remote, local in pairs:
                    show(f"http://127.0.0.1:{local}/  <- port {remote} of job {job.id}'s "
                         f"node 0 ({conn.host}), forwarded while submit follows it")  # fmt: skip
        yield
