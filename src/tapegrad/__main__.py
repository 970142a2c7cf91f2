"""``python -m tapegrad``: see :mod:`tapegrad.cli`."""
import sys

from .cli import main

sys.exit(main())
