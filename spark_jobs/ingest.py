"""The ingest job as a script in the repository, for spark-submit by hand:

    spark-submit --jars ... spark_jobs/ingest.py --plan '<frozen plan JSON>'

It is the installed module ``tidemark_spark/ingest.py`` (which Tidemark itself submits, so that a
wheel install works without this checkout): parse arguments -> build the session -> call the core.
"""

import sys

from tidemark_spark.ingest import main

if __name__ == "__main__":
    sys.exit(main())
