"""What gpujob ships beside a job's program for the program itself to import: today
`gpujob_capture` (a failing step's inputs and RNG states saved for `gpujob replay`).

These modules run inside the job, with the job's Python: standard library plus what a training
job has anyway (torch, imported lazily), and nothing of the rest of `launcher`. The plan copies
them into the job's `pylib/` folder, which run.sh puts first on PYTHONPATH.
"""
