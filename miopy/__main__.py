"""``python -m miopy``: the ``miopy`` tool."""

import sys

from miopy.tool.cli import main

sys.exit(main())
