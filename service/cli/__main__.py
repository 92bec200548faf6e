"""`python -m service.cli`: the `atlas-planner` command."""

import sys

from service.cli import main

sys.exit(main())
