"""Observability: structured logs, metrics, run report."""
