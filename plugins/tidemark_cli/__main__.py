"""``python -m tidemark_cli``: the ``tidemark`` command. Guarded: Airflow's plugin manager imports
every module under plugins/, and this one must not run the CLI when it does."""

import sys

from tidemark_cli.main import main

if __name__ == "__main__":
    sys.exit(main())
