"""Pure planning: a JobSpec and a NodeLayout in, a Plan (files, commands, per node) out. No I/O.

May import `spec/` and jinja2 (templates shipped with the code); never providers, remote,
runtime or state.
"""
