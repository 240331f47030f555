"""``python -m evals.docs_filters``: see the package docstring."""

import sys

from evals.docs_filters import main

sys.exit(main())
