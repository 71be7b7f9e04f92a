"""Hosts rented from a cloud for a job or by `gpujob up`: the launch (hosts.py), every check
before the first cloud call (before_rent.py, cost.py, autostop.py), what a command rented,
terminated on any way out (rent.py, interrupts.py), and the db against the clouds
(reconcile.py). The clouds' own APIs are `launcher.clouds`."""
