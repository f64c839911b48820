"""Team budgets and admission: the per-team ledger (``ledger``), the budgets over rolling
windows (``budgets``), reserving before provision and settling at teardown (``admit``, as the
steps call it: ``steps``), the admission policy both apply (``policy``), the queue's views
(``views``), Kueue: its objects generated from the catalog (``kueue_objects``), a team's
queue read from the API server (``kueue_reader``) and the flavor that covers a placement
(``coverage``); and the queue simulator (``simulate``).
"""
