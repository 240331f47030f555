"""``python -m evals.conversation_memory``: the evaluation (:mod:`.evaluate`)."""

import sys

from evals.conversation_memory.evaluate import main

sys.exit(main())
