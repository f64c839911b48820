"""burst: train models on rented, scarce GPUs abroad, safely and routinely."""

__version__ = "0.1.0"
