"""A SLURM cluster reached through its login host: the cluster's entry and state queries
(cluster.py), the queued submission and its status and cancel (submit.py)."""
