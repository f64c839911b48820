# Shared definitions for the preflight rules. Every rule file is in package burst.preflight
# and adds to the set `reasons`; decision.rego turns them into a verdict.
#
# input: {today, stale_before, spec: {name, data, model, organization, compute},
#         candidate: {region, provider}}     (built by burst/policy/engine.py)
# data:  {facts: {jurisdictions, regions, providers, export, data_classes}, exceptions}
package burst.preflight

facts := data.facts

spec := input.spec

cand := input.candidate

fact_sheet := "shared/reference/compliance-facts.md"

# -- the candidate region and where it is --------------------------------------------------
provider_regions := facts.regions[cand.provider]

region := provider_regions.regions[cand.region]

dest_country := region.country

dest_jurisdiction_codes contains code if {
	some code, j in facts.jurisdictions
	dest_country in j.countries
}

dest_code := code if {
	count(dest_jurisdiction_codes) == 1
	some code in dest_jurisdiction_codes
}

dest := facts.jurisdictions[dest_code]

# -- the data and where it comes from ------------------------------------------------------
origin := facts.jurisdictions[spec.data.origin]

data_class := facts.data_classes[spec.data.classification]

personal if data_class.personal

# the data leaves its origin jurisdiction (free zones list no countries: always leaves)
leaves_origin if {
	origin
	region
	not dest_country in origin.countries
}

safeguards := {s | some s in spec.data.transfer_safeguards}

# -- who rents -----------------------------------------------------------------------------
headquarters contains spec.organization.headquarters

headquarters contains spec.organization.parent_headquarters if {
	spec.organization.parent_headquarters != null
}

# the region is outside the renting organisation's home country
abroad if {
	region
	dest_country != spec.organization.headquarters
}

# NOTE rego-cpp 1.x: sprintf("%s", [x]) prints a string computed by a builtin (concat,
# sprintf, substring, ...) with its quotes and breaks the JSON result. Format only input and
# data values with sprintf; join computed strings with concat("", [...]).

# -- facts: source, confidence, age -----------------------------------------------------------
source_of(fact) := fact.source[0] if {
	count(fact.source) > 0
} else := fact_sheet

weak(fact) if fact.confidence in {"low", "unknown"}

stale(fact) if fact.last_verified < input.stale_before

# a deny fact we are not sure of only reaches review
effect_of(fact, wanted) := wanted if {
	not weak(fact)
} else := "review"

reason(rule, effect, message, fact, fact_id) := {
	"rule": rule,
	"effect": effect,
	"message": message,
	"source": source_of(fact),
	"fact": fact_id,
}
