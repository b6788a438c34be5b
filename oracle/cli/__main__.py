"""`python -m oracle.cli ...`, the same as the `oracle` command."""
import sys

from . import main

sys.exit(main())
