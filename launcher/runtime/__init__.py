"""Carrying out a Plan on its hosts and following the job it started: apply, logs, cancel."""
