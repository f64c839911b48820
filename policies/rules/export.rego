# US export controls on advanced computing, as they bear on renting accelerators abroad.
package burst.preflight

export := facts.export

accelerator_class := name if {
	some name, c in export.accelerator_classes
	spec.compute.gpu_type in c.gpu_types
}

controlled_accelerator if accelerator_class in export.headquarters_rule.controlled_classes

# rule: EXP-ACCEL-UNKNOWN
# effect: review
# summary: the GPU type has no export class on record (policies/export.yaml accelerator_classes)
# facts: export.accelerator_classes.*
reasons contains reason(
	"EXP-ACCEL-UNKNOWN", "review",
	sprintf("GPU type '%s' has no export class on record: cannot tell whether 3A090 rules apply", [spec.compute.gpu_type]),
	{"source": [fact_sheet]}, "export.accelerator_classes",
) if {
	not accelerator_class
}

# rule: EXP-HQ-D5
# effect: deny
# summary: customer or ultimate parent headquartered in D:5 or Macau renting 3A090-class GPUs, anywhere
# facts: export.headquarters_rule
reasons contains reason(
	"EXP-HQ-D5", effect_of(export.headquarters_rule, export.headquarters_rule.effect),
	sprintf("organisation (or parent) headquartered in %s may not use %s (%s) anywhere without a BIS licence (D:5/Macau headquarters rule, 15 CFR 744.23(a)(3))", [
		hq, spec.compute.gpu_type, accelerator_class,
	]),
	export.headquarters_rule, "export.headquarters_rule",
) if {
	controlled_accelerator
	some hq in headquarters
	hq in export.headquarters_rule.countries
}

# rule: EXP-HQ-UNSCREENED
# effect: review
# summary: a headquarters country the export facts do not place inside or outside D:5
# facts: export.screened_headquarters
reasons contains reason(
	"EXP-HQ-UNSCREENED", "review",
	sprintf("headquarters %s is not screened against D:5/Macau in export.yaml; %s is a controlled class (%s)", [
		hq, spec.compute.gpu_type, accelerator_class,
	]),
	export.screened_headquarters, "export.screened_headquarters",
) if {
	controlled_accelerator
	some hq in headquarters
	not hq in export.headquarters_rule.countries
	not hq in export.screened_countries
}

# rule: EXP-HQ-SCREENED
# effect: info
# summary: the headquarters is among the countries the fact sheet places outside D:5 (low confidence)
# facts: export.screened_headquarters
reasons contains reason(
	"EXP-HQ-SCREENED", "info",
	sprintf("headquarters %s is outside the D:5/Macau list (membership confidence %s; verify in eCFR 15 CFR 740 Supp. 1)", [
		hq, export.screened_headquarters.confidence,
	]),
	export.screened_headquarters, "export.screened_headquarters",
) if {
	controlled_accelerator
	some hq in headquarters
	hq in export.screened_countries
}

# rule: EXP-DEST-LICENCE
# effect: info
# summary: the region's country is a licence-required destination for 3A090 (its own country-group fact): the provider holds that authorisation
# facts: regions.*.regions.*.country_groups, export.destination_licence
reasons contains reason(
	"EXP-DEST-LICENCE", "info",
	sprintf("%s is a licence-required destination for %s (country groups %v, confidence %s): the provider, not the renter, must hold the export authorisation", [
		dest_country, accelerator_class, region.country_groups.groups, region.country_groups.confidence,
	]),
	region.country_groups, sprintf("regions.%s.%s.country_groups", [cand.provider, cand.region]),
) if {
	controlled_accelerator
	region.country_groups.destination_licence
}

# rule: EXP-WEIGHTS-4E091
# effect: review
# summary: closed model weights above the 1e26-operation class moving abroad
# facts: export.model_weights
reasons contains reason(
	"EXP-WEIGHTS-4E091", export.model_weights.effect,
	sprintf("closed weights trained with %v operations (> %v, ECCN 4E091 class) would be produced in %s, outside %s", [
		spec.model.training_ops, export.model_weights.threshold_ops, dest_country,
		spec.organization.headquarters,
	]),
	export.model_weights, "export.model_weights",
) if {
	abroad
	spec.model.weights == "closed"
	spec.model.training_ops != null
	spec.model.training_ops > export.model_weights.threshold_ops
}

# rule: EXP-WEIGHTS-OPS-UNKNOWN
# effect: review
# summary: closed weights trained abroad without model.training_ops: the 4E091 class cannot be ruled out
# facts: export.model_weights
reasons contains reason(
	"EXP-WEIGHTS-OPS-UNKNOWN", "review",
	sprintf("closed weights trained in %s without model.training_ops: cannot rule out the 4E091 class (> %v operations)", [
		dest_country, export.model_weights.threshold_ops,
	]),
	export.model_weights, "export.model_weights",
) if {
	abroad
	spec.model.weights == "closed"
	spec.model.training_ops == null
}

# rule: EXP-MODEL-CONTROLLED
# effect: review
# summary: a model its owner classifies as export-controlled, trained outside the home country
# facts: export.controlled_models
reasons contains reason(
	"EXP-MODEL-CONTROLLED", "review",
	sprintf("model classified '%s' would be trained in %s, outside %s: export review needed", [
		spec.model.export_sensitivity, dest_country, spec.organization.headquarters,
	]),
	export.controlled_models, "export.controlled_models",
) if {
	abroad
	spec.model.export_sensitivity == "controlled"
}

# rule: EXP-DATA-CONTROLLED
# effect: review
# summary: export-controlled data crosses a border to reach the region: out of its origin, out of a storage country, or outside the organisation's (or parent's) home country
# facts: export.export_controlled_data
reasons contains reason(
	"EXP-DATA-CONTROLLED", "review",
	concat("", [
		sprintf("export-controlled data processed in %s crosses a border (", [dest_country]),
		concat(", ", sort(crossings)),
		"): controls attach to its origin, where it is stored and the destination; export review needed",
	]),
	export.export_controlled_data, "export.export_controlled_data",
) if {
	spec.data.classification == "export_controlled"
	count(crossings) > 0
}
