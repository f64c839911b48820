# Inference requests (issue 32, tiered inference): a request to a serving tier carries the
# user's data (its class and the country it comes from) to the tier's region, and the answer
# comes back. That crossing is a transfer kind of its own (input.spec.transfer "inference";
# a training run's input has none), judged by the same residency and transfer rules as moving
# the data itself: the candidate is the tier's region, data.origin the request's country,
# data.region the region it enters at (the user's near region). The router
# (burst/inference/residency.py) serves a request only in a region whose decision says
# `data_may_move`; this note records, in each decision, that the decision was made for
# inference traffic and what that means.
package burst.preflight

transfer_kind := object.get(spec, "transfer", "training")

# rule: XFER-INFERENCE
# effect: info
# summary: the decision is for inference requests: a request's data goes to the tier's region and the answer returns, judged as a move of the data (data_may_move is the router's answer)
notices contains {
	"rule": "XFER-INFERENCE", "effect": "info",
	"message": concat("", [
		"inference requests with ", spec.data.classification, " data from ", spec.data.origin,
		" go to ", cand.region, " (",
		object.get(data.index.region_countries, cand.region, ["unknown country"])[0],
		") and their answers return: judged as a move of the data by the residency and transfer rules",
	]),
	"source": "docs/inference.md",
	"fact": "spec.transfer",
} if transfer_kind == "inference"
