"""``python -m smqsup``: the same as the ``smqsup`` command."""

import sys

from smqsup.cli.main import main

sys.exit(main())
