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

First increment only: no spec field, no worker, no aggregator step, no pipeline yet
(docs/regional.md lists what remains).
"""
