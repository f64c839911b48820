# Is the candidate known at all? Unknown providers, regions, origins and data classes never
# allow.
package burst.preflight

# rule: PROVIDER-UNKNOWN
# effect: deny
# summary: the provider is not in policies/regions.yaml and policies/providers.yaml
# facts: regions.*
reasons contains reason(
	"PROVIDER-UNKNOWN", "deny",
	sprintf("provider '%s' is not in the policy facts (regions.yaml, providers.yaml)", [cand.provider]),
	{"source": [fact_sheet]}, "providers",
) if {
	not provider_known
}

provider_known if {
	facts.regions[cand.provider]
	facts.providers[cand.provider]
}

# rule: REGION-UNKNOWN
# effect: deny
# summary: the region is not listed for the provider in policies/regions.yaml
# facts: regions.*
reasons contains reason(
	"REGION-UNKNOWN", "deny",
	sprintf("region '%s' of %s is not in regions.yaml: its country and law are unknown", [cand.region, cand.provider]),
	provider_regions, sprintf("regions.%s", [cand.provider]),
) if {
	provider_regions
	not region
}

# rule: ORIGIN-UNKNOWN
# effect: deny (personal data) / review
# summary: the data's origin jurisdiction has no entry in policies/jurisdictions.yaml
reasons contains reason(
	"ORIGIN-UNKNOWN", effect,
	sprintf("data origin '%s' has no entry in jurisdictions.yaml: its transfer rules are unknown", [spec.data.origin]),
	{"source": [fact_sheet]}, "jurisdictions",
) if {
	not origin
	effect := origin_unknown_effect
}

origin_unknown_effect := "review" if {
	data_class
	not personal
} else := "deny"

# rule: CLASS-UNKNOWN
# effect: deny
# summary: the data class has no entry in policies/data_classes.yaml
reasons contains reason(
	"CLASS-UNKNOWN", "deny",
	sprintf("data class '%s' has no entry in data_classes.yaml", [spec.data.classification]),
	{"source": [fact_sheet]}, "data_classes",
) if {
	not data_class
}

# rule: DEST-JURISDICTION-UNKNOWN
# effect: review
# summary: the region's country is in no jurisdiction (or in several), so the law there is unknown
# facts: regions.*
reasons contains reason(
	"DEST-JURISDICTION-UNKNOWN", "review",
	sprintf("no single jurisdiction in jurisdictions.yaml covers %s (region %s)", [dest_country, cand.region]),
	provider_regions, sprintf("regions.%s.%s", [cand.provider, cand.region]),
) if {
	region
	not dest_code
}

# rule: STORAGE-UNKNOWN
# effect: review
# summary: a region the data (or a shard) is stored in is not in policies/regions.yaml, so the country it would leave is unknown
# facts: regions.*
reasons contains reason(
	"STORAGE-UNKNOWN", "review",
	sprintf("the data is stored in '%s' (data.region / data.shards), a region not in regions.yaml (or in several countries): the law of the country it would leave is unknown", [r]),
	{"source": [fact_sheet]}, concat("", ["storage.", r]),
) if {
	some r in storage_regions
	not storage_countries[r]
}

# rule: REGION-RESTRICTED
# effect: review
# summary: the provider lists the region with restricted access (e.g. Azure uaecentral): renting there needs the provider's approval
# facts: regions.*
reasons contains reason(
	"REGION-RESTRICTED", "review",
	sprintf("%s region %s is access-restricted (the provider must approve the subscription first): %s", [
		cand.provider, cand.region, region.name,
	]),
	provider_regions, sprintf("regions.%s.%s", [cand.provider, cand.region]),
) if {
	region.access == "restricted"
}
