"""The ``tidemark`` command line: an adapter like the DAGs (parse -> call ``tidemark.batch`` -> print)."""
