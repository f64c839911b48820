# What satisfied every rule that could have blocked the candidate: the decision record's
# `satisfied` list, so that an allow is an audit trail on its own (the safeguard and the
# article, the fact and its source). Each entry names the rule it answers.
package burst.preflight

sat(rule, message, fact, fact_id) := {
	"rule": rule, "message": message, "source": source_of(fact), "fact": fact_id,
}

article_of(j) := j.outbound.article if {
	j.outbound.article
} else := j.law

# -- residency ------------------------------------------------------------------------------------
satisfied contains sat(
	"XFER-NO-SAFEGUARD",
	sprintf("%s data is not personal (data_classes.yaml): personal-data transfer rules do not apply", [spec.data.classification]),
	{"source": ["policies/data_classes.yaml"]}, sprintf("data_classes.%s", [spec.data.classification]),
) if {
	data_class
	not personal
}

satisfied contains sat(
	"XFER-NO-SAFEGUARD",
	concat("", [
		sprintf("the personal data crosses no border: origin %s and every storage location are in %s", [spec.data.origin, dest_country]),
	]),
	origin, sprintf("jurisdictions.%s", [spec.data.origin]),
) if {
	personal
	region
	origin
	count(transfers) == 0
}

satisfied contains sat(
	"XFER-NO-SAFEGUARD",
	concat("", [t.from, via_text(t), sprintf(" to %s: destination adequate under ", [dest_country]), article_of(j)]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	adequate_for(t)
}

satisfied contains sat(
	"XFER-NO-SAFEGUARD",
	concat("", [t.from, via_text(t), sprintf(" to %s: safeguard ", [dest_country]), s, " on record, accepted by ", article_of(j)]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound.safeguard_required
	not adequate_for(t)
	some s in safeguards_for(t)
}

satisfied contains sat(
	"XFER-NO-SAFEGUARD",
	concat("", [t.from, via_text(t), sprintf(" to %s: no safeguard required by ", [dest_country]), article_of(j)]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound
	not j.outbound.safeguard_required
}

satisfied contains sat(
	"XFER-ASSESSMENT",
	concat("", [t.from, via_text(t), ": transfer impact/risk assessment ('tia') on record, as ", article_of(j), " requires"]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound.assessment_required
	"tia" in safeguards
}

satisfied contains sat(
	"XFER-ASSESSMENT",
	concat("", [t.from, via_text(t), ": no assessment needed with derogation ", s, " (", article_of(j), ")"]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound.assessment_required
	not "tia" in safeguards
	some s in j.outbound.assessment_waived_by
	s in safeguards
}

satisfied contains sat(
	"INBOUND-UNKNOWN",
	concat("", [dest_code, " rule for foreign personal data in a rented region is on record: ", short(dest.inbound_rented_region.rule)]),
	dest.inbound_rented_region, sprintf("jurisdictions.%s.inbound_rented_region", [dest_code]),
) if {
	foreign_personal_here
	dest.inbound_rented_region
}

satisfied contains sat(
	"RES-LOCALIZATION",
	concat("", ["localisation duty ", d.duty, " honoured: ", cand.region, " is in ", dest_country, ", inside ", stay_in_text(d.stay_in)]),
	d.fact, d.id,
) if {
	region
	some d in duties
	dest_country in d.stay_in
}

satisfied contains sat(
	"RES-LOCALIZATION",
	concat("", [
		sprintf("no localisation duty of %s covers %s data", [spec.data.origin, spec.data.classification]),
		general_text(origin),
	]),
	general_fact(origin), general_id,
) if {
	origin
	count(duties) == 0
}

general_id := sprintf("jurisdictions.%s.localization_general", [spec.data.origin]) if {
	origin.localization_general
} else := sprintf("jurisdictions.%s", [spec.data.origin])

general_fact(j) := j.localization_general if {
	j.localization_general
} else := j

general_text(j) := concat("", [" (", short(j.localization_general.rule), ")"]) if {
	j.localization_general
} else := ""

# -- export ---------------------------------------------------------------------------------------
satisfied contains sat(
	"EXP-HQ-D5",
	sprintf("headquarters %s (parent %v) outside the D:5/Macau list %v", [
		spec.organization.headquarters, spec.organization.parent_headquarters,
		export.headquarters_rule.countries,
	]),
	export.headquarters_rule, "export.headquarters_rule",
) if {
	controlled_accelerator
	not d5_headquarters
}

d5_headquarters if {
	some hq in headquarters
	hq in export.headquarters_rule.countries
}

satisfied contains sat(
	"EXP-HQ-UNSCREENED",
	sprintf("headquarters %s screened outside D:5/Macau (confidence %s)", [hq, export.screened_headquarters.confidence]),
	export.screened_headquarters, "export.screened_headquarters",
) if {
	controlled_accelerator
	some hq in headquarters
	hq in export.screened_countries
}

satisfied contains sat(
	"EXP-DEST-LICENCE",
	sprintf("%s needs no destination licence for %s (country groups %v, not in %v; confidence %s)", [
		dest_country, accelerator_class, region.country_groups.groups,
		region.country_groups.not_in, region.country_groups.confidence,
	]),
	region.country_groups, sprintf("regions.%s.%s.country_groups", [cand.provider, cand.region]),
) if {
	controlled_accelerator
	not region.country_groups.destination_licence
}

satisfied contains sat(
	"EXP-DATA-CONTROLLED",
	sprintf("%s data is not export-controlled", [spec.data.classification]),
	export.export_controlled_data, "export.export_controlled_data",
) if {
	spec.data.classification != "export_controlled"
}

satisfied contains sat(
	"EXP-DATA-CONTROLLED",
	sprintf("export-controlled data stays in %s: its origin, storage and the organisation are all there", [dest_country]),
	export.export_controlled_data, "export.export_controlled_data",
) if {
	spec.data.classification == "export_controlled"
	region
	count(crossings) == 0
}

satisfied contains sat(
	"EXP-WEIGHTS-4E091",
	weights_text,
	export.model_weights, "export.model_weights",
) if {
	not abroad_closed_weights
}

abroad_closed_weights if {
	abroad
	spec.model.weights == "closed"
}

weights_text := sprintf("open weights (published weights are outside ECCN 4E091)", []) if {
	spec.model.weights == "open"
} else := sprintf("closed weights trained at home (%s)", [spec.organization.headquarters])

satisfied contains sat(
	"EXP-MODEL-CONTROLLED",
	sprintf("model export sensitivity '%s' (not 'controlled')", [spec.model.export_sensitivity]),
	export.controlled_models, "export.controlled_models",
) if {
	spec.model.export_sensitivity != "controlled"
}

# -- provider and region --------------------------------------------------------------------------
satisfied contains sat(
	"PROV-CMK",
	sprintf("%s data does not need customer-managed keys (data_classes.yaml)", [spec.data.classification]),
	{"source": ["policies/data_classes.yaml"]}, sprintf("data_classes.%s", [spec.data.classification]),
) if {
	data_class
	not data_class.requires_customer_managed_keys
}

satisfied contains sat(
	"PROV-CMK",
	sprintf("%s offers customer-managed keys (confidence %s, verified %s)", [cand.provider, cmk.confidence, cmk.last_verified]),
	cmk, sprintf("providers.%s.customer_managed_keys", [cand.provider]),
) if {
	data_class.requires_customer_managed_keys
	cmk_effect == "allow"
}

satisfied contains sat(
	"REGION-RESTRICTED",
	sprintf("%s/%s access is %s", [cand.provider, cand.region, region_access]),
	provider_regions, sprintf("regions.%s.%s", [cand.provider, cand.region]),
) if {
	region
	region_access != "restricted"
}

region_access := object.get(region, "access", "open")

# -- the facts themselves -------------------------------------------------------------------------
satisfied contains sat(
	"FACT-LOW-CONFIDENCE",
	sprintf("relied on at confidence %s, last verified %s", [fact.confidence, fact.last_verified]),
	fact, id,
) if {
	some id, fact in used_facts
	not weak(fact)
	not stale(fact)
}
