"""Connections to hosts (local now; SSH through fabric/paramiko next). The only place that
runs commands on hosts or moves files to them."""
