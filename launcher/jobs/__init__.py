"""Jobs of any target: launch (spec -> dry run -> submission -> record), follow (byte-offset
logs over any target's nodes), the job states and their rules, the recorded jobs. Used by
every command and by `launcher.supervise`; asks `launcher.targets` for what differs by target.
"""
