"""Following a job from a command (`logs -f`, `submit` once started): through each of its
recovery's attempts when it has a controller, else its own nodes; when the follow stops with
the job still running, its keeper takes over the failure rule."""

from __future__ import annotations

from collections.abc import Mapping

from launcher.remote.base import Connection
from launcher.state.db import JobRecord, StateDB


def follow_job(
    job: JobRecord,
    *,
    follow: bool,
    node: int | None = None,
    tail: int | None = None,
    opened: Mapping[str, Connection] | None = None,
    first_reads: dict[int, tuple[bytes, dict[str, object]]] | None = None,
    dump_hung: bool = False,
) -> int:
    from launcher.jobs.follow import show_log

    def keep() -> None:
        from launcher.supervise.keeper import hand_to_keeper

        hand_to_keeper(StateDB().job(job.id))

    if follow and tail is None:
        from launcher.supervise.recover_follow import follow_attempts, under_recovery

        if under_recovery(job.id):  # every attempt in turn, one line per recovery
            return follow_attempts(job, node, opened, first_reads)
    return show_log(job, follow=follow, node=node, tail=tail, opened=opened,
                    first_reads=first_reads, on_stop=keep, dump_hung=dump_hung)  # fmt: skip
