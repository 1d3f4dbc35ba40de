"""Tools for the local stack that the tests and the soak (scripts/soak.py) share:
topics and records on the local broker, reads of Delta tables, the environment of a Tidemark
process. Not part of the installed package; nothing in plugins/ imports it."""
