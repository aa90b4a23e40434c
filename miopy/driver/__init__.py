"""miopy-driver: MIOpenDriver's command line (see driver-flags.md). ``main(argv) -> int``."""

from miopy.driver.cli import main

__all__ = ["main"]
