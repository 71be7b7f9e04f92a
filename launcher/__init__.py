"""gpujob: from a job YAML to torchrun in a pinned container on rented GPU hosts, and back.

Dependencies point one way: cli -> (spec, plan) -> (providers, remote, runtime, storage, images)
-> state. `spec/` and `plan/` do no I/O; `agent/` is standard library only.
"""
