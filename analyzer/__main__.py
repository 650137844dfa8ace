"""`python -m analyzer` runs the same command-line interface as `analyze`."""
import sys

from analyzer.cli import main

sys.exit(main())
