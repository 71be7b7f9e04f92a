"""What a submitted job serves (`ports:`, `tensorboard:`), recorded with it and said once:
how to reach each from this machine (`gpujob port-forward`, `gpujob tb`), and a port its
cloud publishes (Vast) at its public URL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.state.served import Served, ServedDB

if TYPE_CHECKING:
    from launcher.spec.job import JobSpec


def record_served(job_id: str, spec: JobSpec, on_this_machine: bool) -> list[str]:
    """The job's ports and TensorBoard folder recorded (none: nothing is), and the lines that
    say how to reach them."""
    logdir = spec.tensorboard.logdir if spec.tensorboard is not None else None
    if not spec.ports and logdir is None:
        return []
    db = ServedDB()
    db.put(Served(job_id, list(spec.ports), logdir))
    served = db.get(job_id)  # with the addresses its cloud published (targets.cloud)
    return reach_lines(served, on_this_machine) if served else []


def reach_lines(served: Served, on_this_machine: bool) -> list[str]:
    job, lines = served.job_id, []
    if served.ports and on_this_machine:
        urls = ", ".join(f"http://127.0.0.1:{port}/" for port in served.ports)
        lines.append(f"job {job} serves on this machine: {urls}")
    elif served.ports:
        listed = ", ".join(map(str, served.ports))
        lines.append(f"job {job} serves port(s) {listed} on its head node: "
                     f"`gpujob port-forward {job}` forwards them here")  # fmt: skip
    lines += public_lines(served)
    if served.tensorboard_logdir is not None:
        lines.append(f"job {job}: `gpujob tb {job}` shows its TensorBoard "
                     f"({served.tensorboard_logdir}) here")  # fmt: skip
    return lines


def public_lines(served: Served, ports: list[int] | None = None) -> list[str]:
    """Each port (of `ports`, else the job's) its cloud publishes (Vast), at the public
    address the cloud mapped it to."""
    job, public = served.job_id, served.public
    return [f"http://{public[port]}/  <- port {port} of job {job}, published by its cloud"
            for port in (ports or served.ports) if port in public]  # fmt: skip
