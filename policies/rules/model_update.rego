# Model updates (issue 21, hybrid cross-region training): with training.strategy
# "regional-sync", the worker in each region trains only on that region's shard, and every
# round sends a model update (a compressed pseudo-gradient) derived from it to the aggregation
# region. That crossing is a transfer kind of its own, judged here for the candidate that is a
# worker region: whether the rules that bind the data (personal-data transfer rules, a
# localisation duty, export control of the data, an important/core-data regime) also bind
# updates derived from it. The fact
# sheet (shared/reference/compliance-facts.md) records nothing on that question for any
# jurisdiction, so the shipped facts (data_classes.yaml, model_updates) are `unknown`: such
# data reviews, and only a fact saying the rule does not extend to updates, sure and fresh,
# lets it pass. Data no such rule binds (public; internal or confidential data no important-
# data regime covers) passes with a satisfied entry naming its class.
#
# input.spec.training: {strategy, regional_sync: {regions, aggregation_region} | null}
package burst.preflight

training := object.get(spec, "training", {})

regional_sync := object.get(training, "regional_sync", null)

regional if {
	object.get(training, "strategy", "single-region") == "regional-sync"
	regional_sync != null
}

aggregation_region := regional_sync.aggregation_region if regional

# the candidate runs a regional worker whose updates go to another region
update_sender if {
	regional
	cand.region in regional_sync.regions
	cand.region != aggregation_region
}

aggregation_country := region_country(aggregation_region)

# the updates cross a border (the aggregation region is in another country, or its country
# is unknown: then it is judged as crossing)
update_crosses if {
	update_sender
	region
	not aggregation_country == dest_country
}

model_update_facts := object.get(facts, "model_updates", {})

# the aspects of the data that a rule binds, with the fact saying whether that rule extends
# to model updates derived from the data
update_aspects contains "personal" if personal

update_aspects contains "localisation" if count(duties) > 0

update_aspects contains "export_controlled" if spec.data.classification == "export_controlled"

# the data's origin, or the worker's country, regulates the export of important/core data of
# this class (residency.rego XFER-IMPORTANT-DATA judges the data itself)
update_aspects contains "important_data" if {
	some code in {spec.data.origin, dest_code}
	spec.data.classification in facts.jurisdictions[code].important_data.classes
}

aspect_text := {
	"personal": "personal-data transfer rules",
	"localisation": "the localisation duty on the data",
	"export_controlled": "export control of the data",
	"important_data": "the important/core-data export regime",
}

# the fact clears the aspect: it says the rule does not extend to updates (how sure and how
# fresh it is, is FACT-LOW-CONFIDENCE's and FACT-STALE's job via used_facts)
aspect_cleared(a) if model_update_facts[a].covered == false

used_facts[concat("", ["model_updates.", a])] := model_update_facts[a] if {
	update_crosses
	some a in update_aspects
	aspect_cleared(a)
}

update_route := concat("", [
	"model updates derived from the ", spec.data.classification, " shard in ", cand.region,
	" (", dest_country, ") go to the aggregation region ", aggregation_region,
	" (", object.get(data.index.region_countries, aggregation_region, ["unknown country"])[0], ")",
])

unknown_fact := {"source": [fact_sheet], "confidence": "unknown", "rule": "no fact on record"}

# rule: XFER-MODEL-UPDATE
# effect: review
# summary: a regional worker's model updates cross to the aggregation region while a rule binding its shard (personal data, localisation, export control) may extend to them, or the aggregation region is unknown
# facts: model_updates.personal, model_updates.localisation, model_updates.export_controlled, model_updates.important_data, regions.*
reasons contains reason(
	"XFER-MODEL-UPDATE", "review",
	concat("", [
		update_route, ": whether ", aspect_text[a], " extend to them is ", fact.confidence,
		" (", short(statement_of(fact)), ")",
	]),
	fact, concat("", ["model_updates.", a]),
) if {
	update_crosses
	some a in update_aspects
	not aspect_cleared(a)
	fact := object.get(model_update_facts, a, unknown_fact)
}

reasons contains reason(
	"XFER-MODEL-UPDATE", "review",
	sprintf("the aggregation region %s (training.regional_sync.aggregation_region) is not in regions.yaml, or in several countries: the border its model updates cross is unknown", [aggregation_region]),
	{"source": [fact_sheet]}, sprintf("regions.%s", [aggregation_region]),
) if {
	update_sender
	not aggregation_country
}

satisfied contains sat(
	"XFER-MODEL-UPDATE",
	concat("", [
		update_route, ": ", spec.data.classification,
		" data is bound by no personal-data, localisation, export or important-data rule on record, so its updates are not either",
	]),
	{"source": ["policies/data_classes.yaml"]}, sprintf("data_classes.%s", [spec.data.classification]),
) if {
	update_crosses
	aggregation_country
	count(update_aspects) == 0
}

satisfied contains sat(
	"XFER-MODEL-UPDATE",
	concat("", [update_route, ": ", aspect_text[a], " do not extend to them (", short(statement_of(fact)), ")"]),
	fact, concat("", ["model_updates.", a]),
) if {
	update_crosses
	some a in update_aspects
	aspect_cleared(a)
	fact := model_update_facts[a]
}

satisfied contains sat(
	"XFER-MODEL-UPDATE",
	sprintf("model updates from %s stay in %s: the aggregation region %s is in the same country", [cand.region, dest_country, aggregation_region]),
	{"source": ["policies/regions.yaml"]}, sprintf("regions.%s", [aggregation_region]),
) if {
	update_sender
	region
	aggregation_country == dest_country
}

# nothing to judge (an allow still says why the rule did not block it)
satisfied contains sat(
	"XFER-MODEL-UPDATE",
	"training.strategy is not regional-sync: no model updates leave the region",
	{"source": ["docs/regional.md"]}, "training.strategy",
) if not regional

satisfied contains sat(
	"XFER-MODEL-UPDATE",
	sprintf("%s sends no model updates: it is the aggregation region or runs no regional worker", [cand.region]),
	{"source": ["docs/regional.md"]}, "training.regional_sync",
) if {
	regional
	not update_sender
}
