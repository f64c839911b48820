"""Team budgets and admission: the per-team ledger (``ledger``), the budgets over rolling
windows (``budgets``), reserving before provision and settling at teardown (``admit``, as the
steps call it: ``steps``), the admission policy both apply (``policy``), the queue's views
(``views``, ``kueue_objects``) and the queue simulator (``simulate``)."""
