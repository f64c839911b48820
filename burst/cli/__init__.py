"""The ``burst`` command line. Commands live one module each in ``burst.cli.commands``."""
