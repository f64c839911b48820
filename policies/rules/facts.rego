# Facts an allow depends on must be sure and fresh: low or unknown confidence, or a
# last_verified older than settings.max_fact_age_days, never allows.
package burst.preflight

used_facts[sprintf("regions.%s", [cand.provider])] := provider_regions if region

# the outbound rule of every country the personal data leaves (origin and storage countries)
used_facts[concat("", ["jurisdictions.", t.from, ".outbound"])] := facts.jurisdictions[t.from].outbound if {
	some t in transfers
}

used_facts[sprintf("jurisdictions.%s.inbound_rented_region", [dest_code])] := dest.inbound_rented_region if {
	foreign_personal_here
	dest.inbound_rented_region
}

# data leaving its origin rests on what the sources say about localisation there ("none
# general; sectoral rules" is a fact too, with its own confidence: Malaysia's and Qatar's are low)
used_facts[sprintf("jurisdictions.%s.localization_general", [spec.data.origin])] := origin.localization_general if {
	leaves_origin
	origin.localization_general
}

# ... and, for data stored today in another country and moved out of it, on what the sources
# say about localisation in that country
used_facts[concat("", ["jurisdictions.", code, ".localization_general"])] := j.localization_general if {
	some code in storage_left
	j := facts.jurisdictions[code]
	j.localization_general
}

# a localisation duty that covers the data, honoured because the candidate is inside: the
# allow rests on the duty's countries being right
used_facts[d.id] := d.fact if {
	some d in duties
	dest_country in d.stay_in
}

# renting a controlled accelerator in a region rests on that region's own country-group fact
# (its destination-licence answer), whatever its confidence; Israel's is contested
used_facts[sprintf("regions.%s.%s.country_groups", [cand.provider, cand.region])] := region.country_groups if {
	controlled_accelerator
}

used_facts[sprintf("export.accelerator_classes.%s", [accelerator_class])] := export.accelerator_classes[accelerator_class]

used_facts["export.headquarters_rule"] := export.headquarters_rule if controlled_accelerator

# an allow of a controlled accelerator for a screened headquarters rests on the screening
# (EXP-HQ-SCREENED): without it the headquarters would be unscreened (EXP-HQ-UNSCREENED)
used_facts["export.screened_headquarters"] := export.screened_headquarters if {
	controlled_accelerator
	some hq in headquarters
	hq in export.screened_countries
}

# an allow in a licence-required destination rests on the provider holding the licence
# (EXP-DEST-LICENCE)
used_facts["export.destination_licence"] := export.destination_licence if {
	controlled_accelerator
	dest_country in export.destination_licence_countries
}

# rule: FACT-LOW-CONFIDENCE
# effect: review
# summary: a fact the decision relies on has low or unknown confidence
# facts: regions.*, regions.*.regions.*.country_groups, jurisdictions.*.outbound, jurisdictions.*.inbound_rented_region, jurisdictions.*.localization_general, jurisdictions.*.localization, jurisdictions.*.host_localization, export.accelerator_classes.*, export.headquarters_rule, export.screened_headquarters, export.destination_licence
reasons contains reason(
	"FACT-LOW-CONFIDENCE", "review",
	concat("", [id, sprintf(" is %s confidence (", [fact.confidence]), short(statement_of(fact)), "): verify it before relying on it"]),
	fact, id,
) if {
	some id, fact in used_facts
	weak(fact)
}

# rule: FACT-STALE
# effect: review
# summary: a fact the decision relies on was last verified longer ago than settings.max_fact_age_days
# facts: regions.*, regions.*.regions.*.country_groups, jurisdictions.*.outbound, jurisdictions.*.inbound_rented_region, jurisdictions.*.localization_general, jurisdictions.*.localization, jurisdictions.*.host_localization, export.accelerator_classes.*, export.headquarters_rule, export.screened_headquarters, export.destination_licence
reasons contains reason(
	"FACT-STALE", "review",
	concat("", [id, sprintf(" was last verified %s, before %s (settings.max_fact_age_days): re-verify it", [
		fact.last_verified, input.stale_before,
	])]),
	fact, id,
) if {
	some id, fact in used_facts
	stale(fact)
}

short(text) := concat("", [substring(text, 0, 90), "..."]) if {
	count(text) > 90
} else := text
