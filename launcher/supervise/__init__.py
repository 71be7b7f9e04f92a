"""What outlives a command: the keeper of a detached multi-node job's failure rule, the
recovery controller, and the detached processes and locks they run as. They reach jobs
through `launcher.jobs` and the targets, never through a command.
"""
