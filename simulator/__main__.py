"""`python -m simulator ...` entry point."""
from simulator.cli import main

raise SystemExit(main())
