"""Your own training program (``training.command``): any command, with burst's guarantees."""
