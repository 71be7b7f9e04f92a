"""`python -m launcher` = `gpujob`, for machines where the console script is not installed."""

from launcher.cli import main

main()
