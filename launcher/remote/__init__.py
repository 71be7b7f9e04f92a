"""Connections to hosts (this machine, or SSH through OpenSSH's client). The only place that
runs commands on hosts or moves files to them."""
