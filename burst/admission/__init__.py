"""Team budgets and admission: the per-team ledger (``ledger``), the budgets over rolling
windows (``budgets``), reserving before provision and settling at teardown (``admit``), the
queue view (``queueview``) and the queue simulator (``simulate``)."""
