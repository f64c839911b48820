"""Training: the one resilient loop and what it is made of.

``loop`` runs one attempt of the train step, over an ``engine`` (plain torch, ``ddp_engine``,
``fsdp_engine``, ``deepspeed_engine``) built from the spec's entrypoint (``setup``,
``entrycheck``, the quickstart's ``example``), under ``launch`` (torchrun's ranks, ``ranks``).
Its parts: ``checkpoints`` (the run's store and writer), ``schedule`` (when to save),
``leases`` (one trainer per run, the heartbeat), ``records`` and ``attempts`` (the attempt
records and the step document), ``spending`` (the budget), ``preemption`` (the emergency
save), ``wrapup`` (final commit, GC, replication) and ``endings`` (how an attempt ends, the
same in every mode). A strategy that synchronises is a ``hooks.LoopHook`` of the loop (regional
sync); a user's own program is its supervisor mode (``burst.program.supervise``, passed in by
the train step). Framework adapters for a user's program are ``burst.adapters``.
"""
