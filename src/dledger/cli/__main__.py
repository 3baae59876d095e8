"""``python -m dledger.cli``: the ``dledger`` command."""

import sys

from dledger.cli import main

sys.exit(main())
