"""Where a job runs: this machine, SSH hosts, hosts rented from a cloud, a SLURM cluster.
Each is a `Target` (base.py) found by the registry; the rest of gpujob asks a target and its
traits and never compares kind names (a unit test says so).
"""
