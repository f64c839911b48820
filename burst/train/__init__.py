"""Training: the one resilient loop and what it is made of.

``loop`` runs one attempt of the train step, over an ``engine`` (plain torch, ``ddp_engine``,
``fsdp_engine``, ``deepspeed_engine``; each saves and restores through ``setup_state``) built
from the spec's entrypoint (``setup``, ``entrycheck``, the quickstart's ``example``), under
``launch`` (torchrun's ranks, ``ranks``). Its parts: ``checkpoints`` (the run's store and
writer), ``schedule`` (when to save), ``leases`` (one trainer per run, the heartbeat),
``records`` (what an attempt knows and the step document) and ``attempts`` (its own attempt
record; the records' reader is ``burst.attempt_records``), ``spending`` (the budget),
``preemption`` (the emergency save) and ``survivors`` (a rank lost during it), ``spot_probe``
(back to spot from an on-demand fallback), ``wrapup`` (final commit, GC, replication),
``endings`` (how an attempt ends, the same in every mode), ``weights`` (the weights' digest)
and ``extension_locks`` (DeepSpeed's stale build locks). A strategy that synchronises is a
``hooks.LoopHook`` of the loop: regional sync's worker (``regional``), whose rounds the
``aggregator`` joins; a user's own program is the loop's supervisor mode
(``burst.program.supervise``, passed in by the train step). Framework adapters for a user's
program are ``burst.adapters``.
"""
