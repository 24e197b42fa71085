"""``python -m specsim.cli``: the same as the ``specsim`` command."""

import sys

from specsim.cli import main

sys.exit(main())
