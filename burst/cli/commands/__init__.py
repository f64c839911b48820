"""One module per command; each defines ``command``. Registered by ``burst.cli.main``."""
