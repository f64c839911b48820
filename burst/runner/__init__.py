"""The one local executor of the compiled Argo manifests: ``burst run`` runs the very
WorkflowTemplate Argo runs, on this machine (``engine``, ``local``), and follows or submits
runs on a cluster (``argo``, ``follow``, ``argo_report``).

The engine's parts: ``expr`` and ``tags`` (Argo's expressions and ``{{...}}`` tags),
``fanout`` (``withItems``/``withParam``), ``pods`` (one attempt of a container step) and
``containers`` (each pod in its template's image), ``features`` (what it executes, and the
refusal of the rest), ``lint`` (what the JSON Schema cannot see); a regional run's regions on
one machine: ``regional`` and ``regions``.
"""

#: How long an unreachable or failing Argo server is ridden out before giving up following
#: (burst.runner.follow; here so that the CLI's options read it without importing the runner).
DEFAULT_MAX_OUTAGE_S = 900.0
