"""One module per user command (submit, logs, status, cancel, up, down, ssh, recover): each
is what `launcher.cli` calls for that command. Commands do not import each other (an
import-linter `independence` contract): what two of them share lives in `launcher.jobs`
(jobs of any target), `launcher.supervise` (what outlives a command) or `launcher.targets`.
"""
