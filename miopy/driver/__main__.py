"""``python -m miopy.driver``."""

import sys

from miopy.driver.cli import main

sys.exit(main())
