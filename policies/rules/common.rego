# Shared definitions for the preflight rules. Every rule file is in package burst.preflight
# and adds to the set `reasons`; decision.rego turns them into a verdict.
#
# input: {today, stale_before, spec: {name, sha256, data, model, organization, compute},
#         candidate: {region, provider}}     (built by burst/policy/engine.py)
# spec.data.shards is the list of regions holding a shard (empty when the spec has none).
# data:  {facts: {jurisdictions, regions, providers, export, data_classes}, exceptions,
#         index: {region_countries, country_jurisdictions}}
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

# the one jurisdiction whose countries include `country` (undefined when none or several);
# data.index is built by burst/policy/engine.py from the facts (lookup_index)
jurisdiction_of(country) := code if {
	codes := data.index.country_jurisdictions[country]
	count(codes) == 1
	code := codes[0]
}

# a region code of any provider -> its country (undefined when unknown or ambiguous)
region_country(code) := country if {
	countries := data.index.region_countries[code]
	count(countries) == 1
	country := countries[0]
}

# -- where the data is stored today ---------------------------------------------------------
# data.shards' regions when the spec splits the data, else data.region; neither: the data is
# taken to be at its origin (the origin's rules below cover it).
shard_regions := object.get(spec.data, "shards", [])

storage_regions contains r if {
	some r in shard_regions
	not own_shard_only
}

# a regional-sync worker (model_update.rego) reads only its own region's shard: the other
# shards never move to it
storage_regions contains cand.region if own_shard_only

own_shard_only if {
	regional
	cand.region in regional_sync.regions
	cand.region in shard_regions
}

storage_regions contains spec.data.region if {
	count(shard_regions) == 0
	object.get(spec.data, "region", null) != null
}

storage_countries[r] := region_country(r) if some r in storage_regions

# a storage location in another country than the candidate's: using it moves the data out of
# that country into the candidate's
moved_from[r] := c if {
	region
	some r, c in storage_countries
	c != dest_country
}

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

# the countries the data belongs to for export purposes: the origin's, or a free zone's host
# country, or the origin code itself when it is not on record
export_origin_countries := {c | some c in origin.countries} | {h | h := origin.host} if {
	origin
} else := {spec.data.origin}

# using the candidate moves the data (or the model trained on it) across a border: out of its
# origin, out of a storage country, or out of the country of the organisation or its parent
crossings contains sprintf("origin %s", [spec.data.origin]) if {
	region
	not dest_country in export_origin_countries
}

crossings contains concat("", ["storage ", r, " (", c, ")"]) if some r, c in moved_from

crossings contains sprintf("headquarters %s", [hq]) if {
	region
	some hq in headquarters
	hq != dest_country
}

# NOTE rego-cpp 1.x: sprintf("%s", [x]) prints a string computed by a builtin (concat,
# sprintf, substring, ...) with its quotes and breaks the JSON result. Format only input and
# data values with sprintf; join computed strings with concat("", [...]).

# -- facts: source, confidence, age -----------------------------------------------------------
source_of(fact) := fact.source[0] if {
	count(fact.source) > 0
} else := fact_sheet

weak(fact) if fact.confidence in {"low", "unknown"}

# what a fact says, for messages: its rule, else its note, else its name (a region list has
# no rule field; a message must never be undefined, or the reason silently disappears)
statement_of(fact) := fact.rule if {
	fact.rule
} else := fact.note if {
	fact.note
} else := fact.name if {
	fact.name
} else := "no statement on record"

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
