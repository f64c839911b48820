"""One module per containerized pipeline step: ``python -m burst.steps.<name>``.

Each parses its arguments, calls ``burst.*`` and writes one JSON document (``burst.stepio``).
"""
