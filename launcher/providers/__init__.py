"""Where nodes come from: local (this machine) now; lambda, vast and ssh hosts next.

Each provider turns a job's needs into a `Target` for planning and a Connection per host.
"""
