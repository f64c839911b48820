"""Local execution of the burst pipeline on this machine."""

#: How long an unreachable or failing Argo server is ridden out before giving up following
#: (burst.runner.follow; here so that the CLI's options read it without importing the runner).
DEFAULT_MAX_OUTAGE_S = 900.0
