"""The one local executor of the compiled Argo manifests: ``burst run`` runs the very
WorkflowTemplate Argo runs, on this machine (``engine``, ``local``), and follows or submits
runs on a cluster (``argo``, ``follow``)."""

#: How long an unreachable or failing Argo server is ridden out before giving up following
#: (burst.runner.follow; here so that the CLI's options read it without importing the runner).
DEFAULT_MAX_OUTAGE_S = 900.0
