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

satisfied contains sat(
	"FACT-STALE",
	sprintf("last verified %s, not before %s (settings.max_fact_age_days)", [fact.last_verified, input.stale_before]),
	fact, id,
) if {
	some id, fact in used_facts
	not stale(fact)
}

# -- inventory: everything the decision needs is on record ----------------------------------------
satisfied contains sat(
	"PROVIDER-UNKNOWN",
	sprintf("provider %s is on record (regions.yaml, providers.yaml)", [cand.provider]),
	provider_regions, sprintf("regions.%s", [cand.provider]),
) if provider_known

satisfied contains sat(
	"REGION-UNKNOWN",
	sprintf("region %s (%s) is on record in %s", [cand.region, region.name, dest_country]),
	provider_regions, sprintf("regions.%s", [cand.provider]),
) if region

satisfied contains sat(
	"DEST-JURISDICTION-UNKNOWN",
	sprintf("%s is in jurisdiction %s (%s)", [dest_country, dest_code, dest.law]),
	dest, sprintf("jurisdictions.%s", [dest_code]),
) if dest

satisfied contains sat(
	"CLASS-UNKNOWN",
	sprintf("data class %s is on record: %s", [spec.data.classification, data_class.description]),
	{"source": ["policies/data_classes.yaml"]}, sprintf("data_classes.%s", [spec.data.classification]),
) if data_class

satisfied contains sat(
	"ORIGIN-UNKNOWN",
	sprintf("origin %s is on record: %s (%s)", [spec.data.origin, origin.name, origin.law]),
	origin, sprintf("jurisdictions.%s", [spec.data.origin]),
) if origin

satisfied contains sat(
	"STORAGE-UNKNOWN",
	concat("", ["stored in ", r, ", in ", c]),
	provider_regions, concat("", ["storage.", r]),
) if some r, c in storage_countries

satisfied contains sat(
	"STORAGE-UNKNOWN",
	"no storage location given (data.region, data.shards): the data is taken to be at its origin",
	{"source": ["docs/policy.md"]}, "storage",
) if count(storage_regions) == 0

satisfied contains sat(
	"EXP-ACCEL-UNKNOWN",
	sprintf("GPU type %s is export class %s", [spec.compute.gpu_type, accelerator_class]),
	export.accelerator_classes[accelerator_class], sprintf("export.accelerator_classes.%s", [accelerator_class]),
) if accelerator_class

# -- transfer rules that had nothing to check -----------------------------------------------------
transfer_rules := {"XFER-NO-SAFEGUARD", "XFER-ASSESSMENT", "XFER-FILING", "XFER-OUTBOUND-UNKNOWN", "INBOUND-UNKNOWN"}

satisfied contains sat(
	rule,
	sprintf("%s data is not personal (data_classes.yaml): personal-data transfer rules do not apply", [spec.data.classification]),
	{"source": ["policies/data_classes.yaml"]}, sprintf("data_classes.%s", [spec.data.classification]),
) if {
	data_class
	not personal
	some rule in transfer_rules
}

satisfied contains sat(
	rule,
	sprintf("the personal data crosses no border: origin %s and every storage location are in %s", [spec.data.origin, dest_country]),
	origin, sprintf("jurisdictions.%s", [spec.data.origin]),
) if {
	personal
	region
	origin
	count(transfers) == 0
	some rule in transfer_rules
}

satisfied contains sat(
	"XFER-OUTBOUND-UNKNOWN",
	concat("", [t.from, via_text(t), " outbound rule on record: ", article_of(j)]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound
}

satisfied contains sat(
	"XFER-ASSESSMENT",
	concat("", [t.from, via_text(t), ": ", article_of(j), " requires no transfer impact assessment", assessment_note(t)]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound
	not assessment_needed(t)
}

assessment_needed(t) if {
	facts.jurisdictions[t.from].outbound.assessment_required
	not adequate_for(t)
}

assessment_note(t) := " (adequate destination)" if adequate_for(t) else := ""

satisfied contains sat(
	"XFER-FILING",
	concat("", [t.from, via_text(t), ": ", article_of(j), " imposes no filing or volume test the spec cannot show"]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound
	not j.outbound.always_review
}

# -- model export rules with something to check ---------------------------------------------------
satisfied contains sat(
	"EXP-WEIGHTS-4E091",
	sprintf("closed weights trained with %v operations, not above %v (ECCN 4E091 class)", [
		spec.model.training_ops, export.model_weights.threshold_ops,
	]),
	export.model_weights, "export.model_weights",
) if {
	abroad_closed_weights
	spec.model.training_ops != null
	spec.model.training_ops <= export.model_weights.threshold_ops
}

satisfied contains sat(
	"EXP-WEIGHTS-OPS-UNKNOWN",
	weights_ops_text,
	export.model_weights, "export.model_weights",
) if {
	not ops_unknown_abroad
}

ops_unknown_abroad if {
	abroad_closed_weights
	spec.model.training_ops == null
}

weights_ops_text := sprintf("training operations on record (%v)", [spec.model.training_ops]) if {
	spec.model.training_ops != null
} else := weights_text

satisfied contains sat(
	"EXP-MODEL-CONTROLLED",
	sprintf("controlled model trained at home (%s)", [spec.organization.headquarters]),
	export.controlled_models, "export.controlled_models",
) if {
	spec.model.export_sensitivity == "controlled"
	region
	not abroad
}

# -- important / core data ------------------------------------------------------------------------
satisfied contains sat(
	"XFER-IMPORTANT-DATA",
	concat("", [
		"no important/core-data export regime covers ", spec.data.classification,
		" data leaving the origin or a storage country (jurisdictions.*.important_data)",
	]),
	{"source": ["policies/jurisdictions.yaml"]}, "jurisdictions.*.important_data",
) if {
	data_class
	count({code |
		some code in important_data_from
		spec.data.classification in facts.jurisdictions[code].important_data.classes
	}) == 0
}

# -- storage countries' localisation -------------------------------------------------------------
satisfied contains sat(
	"RES-LOCALIZATION",
	concat("", [
		"no localisation duty of ", code, " (where the data is stored) covers ",
		spec.data.classification, " data", general_text(facts.jurisdictions[code]),
	]),
	general_fact(facts.jurisdictions[code]), concat("", ["jurisdictions.", code, ".localization_general"]),
) if {
	some code in storage_left
	facts.jurisdictions[code]
	count([d | some d in duties; d.basis == "storage"]) == 0
}

# -- classes whose localisation must be on record -------------------------------------------------
satisfied contains sat(
	"RES-LOCALIZATION-UNKNOWN",
	concat("", [
		spec.data.classification, " data: ", localisation_on_record_text,
	]),
	{"source": ["policies/data_classes.yaml"]}, sprintf("data_classes.%s", [spec.data.classification]),
) if {
	data_class
	count(class_localisation_unknown) == 0
}

localisation_on_record_text := "a localisation fact for the class is on record wherever it leaves" if {
	data_class.localisation_fact_required
} else := "the class needs no class-specific localisation fact (data_classes.yaml)"
