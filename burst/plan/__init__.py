"""Planning: where to run, on what capacity, at what expected cost and time.

catalog      the facts (prices, pre-emption, links), each with a source and a date
workload     how much compute a spec needs (expected training hours, checkpoint size)
cost         the cost model (seed 001 and seed 003), egress and storage, GB convention
interval     the Young/Daly checkpoint interval
goodput      the discrete-event pre-emption simulator behind ``burst simulate``
crossregion  seed 002's iteration-time estimators and the span recommendation
datastrategy compute to data, data to compute, or regional shards (seed 000)
placement    candidates, ranking, budget refusal: the plan document
chart        the cost-versus-time PNG
"""
