"""Training: the resilient loop, the example model, and framework adapters."""
