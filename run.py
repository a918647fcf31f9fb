#!/usr/bin/env python
"""Train or evaluate R3Net: ``python run.py --help``."""

import sys

from ignite_r3net.cli import main

if __name__ == "__main__":
    sys.exit(main())
