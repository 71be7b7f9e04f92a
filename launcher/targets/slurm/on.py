"""Whether `--on` names a SLURM cluster (`slurm:NAME[/PARTITION]`): asked by every submit
before it knows its target, so nothing is imported here (cluster.py imports the plan and
the spec models, which `submit` imports while it contacts the hosts; issue 32)."""


def is_slurm_target(on: tuple[str, ...] | list[str]) -> bool:
    return any(value.startswith("slurm:") for value in on)
