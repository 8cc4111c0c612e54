"""`python -m assistlab ...`: the command line lives in assistlab/cli."""
from .cli import main

raise SystemExit(main())
