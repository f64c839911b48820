"""Hybrid cross-region training (issue 21): regional workers train on their own region's shard
and exchange only compressed model deltas with an aggregator every H local steps (DiLoCo).

compression  int8 with per-block scales (default), top-k with error feedback, none; exact bytes
outer        the outer optimizer (Nesterov, DiLoCo's defaults), token-weighted averaging,
             the staleness rule
aggregate    one round in process: decode, weight, outer step, the compressed update that
             workers and aggregator apply alike
links        the link emulator: seconds, USD and a log of every transfer between regions
estimates    pure plan estimates: bytes and egress per round and per run, sync time over seed
             002's link model, the comparison with synchronous data parallelism, the choice of H
defaults     the outer optimizer's measured defaults per (regions, H)
codec_sizes  what a pseudo-gradient weighs under each codec
rounds       where a run's rounds begin and end (H inner steps, or adaptive rounds)
stores       the stores of a regional run, and the only way bytes cross between regions
runtime      what worker and aggregator share: their configuration, committing and reading
site         what the machine a regional pod runs on gives it, off a cluster

The processes sit above this package: the worker is the sync hook of the one train loop
(``burst.train.regional``), the aggregator ``burst.train.aggregator``; the ``train`` and
``aggregate`` steps run them, and ``burst.plan.regional`` plans a run and tells each process
its part. This package imports neither ``burst.train`` nor the runner nor the steps.

A regional run is a `regional-sync` spec: `burst run` runs it on one machine through the local
runner, and the `burst-regional` Argo WorkflowTemplate runs it on a cluster (docs/regional.md,
which also lists what is not built yet).
"""
