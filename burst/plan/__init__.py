"""Planning: where to run, on what capacity, at what expected cost and time.

catalog      the facts (prices, pre-emption, links), each with a source and a date
workload     how much compute a spec needs (expected training hours, checkpoint size)
cost         the cost model (seed 001 and seed 003), egress and storage, GB convention
interval     the Young/Daly checkpoint interval
reliability  how often the job is pre-empted and checkpoints, computed once
goodput      the discrete-event pre-emption simulator behind ``burst simulate``; ``fallback``
             its on-demand fallback mode
crossregion  seed 002's iteration-time estimators and the span recommendation
datastrategy compute to data, data to compute, or regional shards (seed 000)
placement    the plan document, in four stages: ``eligibility`` (which sites may be priced),
             ``pricing`` (with ``billing``: what a site costs), ``ranking`` (the order provision
             tries, the budget and deadline cut), ``assembly`` (the document)
regional     the plan of a regional-sync spec: its rounds, H, bytes and egress
explain      ``burst plan --explain``: burst's figure beside each seed's simple model
chart        the cost-versus-time PNG
"""
