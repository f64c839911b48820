# Data residency: localization duties and personal-data transfer rules of the data's origin,
# and what the law of the rented region's country says about foreign data processed there.
package burst.preflight

# rule: RES-LOCALIZATION
# effect: deny (as the fact says; review when its confidence is low or unknown)
# summary: the origin jurisdiction requires this data class to stay in its countries
# facts: jurisdictions.*.localization
reasons contains reason(
	"RES-LOCALIZATION", effect_of(loc, loc.effect),
	concat("", [
		sprintf("%s %s data must stay in ", [spec.data.origin, spec.data.classification]),
		stay_in(origin),
		sprintf(" (localization duty %s); %s is in %s", [loc.id, cand.region, dest_country]),
	]),
	loc, sprintf("jurisdictions.%s.localization.%s", [spec.data.origin, loc.id]),
) if {
	leaves_origin
	some loc in origin.localization
	spec.data.classification in loc.classes
	localization_applies(loc)
}

localization_applies(loc) if not loc.headquarters_in

localization_applies(loc) if spec.organization.headquarters in loc.headquarters_in

stay_in(j) := concat("/", j.countries) if {
	count(j.countries) > 0
} else := "the free zone"

adequate if dest_country in origin.outbound.adequate_destinations

transfer_out if {
	personal
	leaves_origin
}

# rule: XFER-OUTBOUND-UNKNOWN
# effect: review
# summary: personal data leaves a jurisdiction whose outbound rule is not recorded
# facts: jurisdictions.*.outbound
reasons contains reason(
	"XFER-OUTBOUND-UNKNOWN", "review",
	sprintf("%s has no outbound transfer rule on record; %s data to %s cannot be assessed", [
		spec.data.origin, spec.data.classification, dest_country,
	]),
	origin, sprintf("jurisdictions.%s", [spec.data.origin]),
) if {
	transfer_out
	not origin.outbound
}

# rule: XFER-NO-SAFEGUARD
# effect: deny
# summary: personal data leaves its origin without a transfer safeguard the origin's law accepts
# facts: jurisdictions.*.outbound
reasons contains reason(
	"XFER-NO-SAFEGUARD", "deny",
	concat("", [
		sprintf("%s personal data to %s (%s) needs one of [", [spec.data.origin, dest_country, cand.region]),
		concat(", ", origin.outbound.accepted_safeguards),
		"] in data.transfer_safeguards",
	]),
	origin.outbound, sprintf("jurisdictions.%s.outbound", [spec.data.origin]),
) if {
	transfer_out
	origin.outbound.safeguard_required
	not adequate
	count({s | some s in origin.outbound.accepted_safeguards; s in safeguards}) == 0
}

# rule: XFER-ASSESSMENT
# effect: review
# summary: the origin's law also needs a transfer impact / risk assessment ('tia') on record
# facts: jurisdictions.*.outbound
reasons contains reason(
	"XFER-ASSESSMENT", "review",
	sprintf("%s requires a transfer impact/risk assessment for %s data to %s: add 'tia' to data.transfer_safeguards once done", [
		spec.data.origin, spec.data.classification, dest_country,
	]),
	origin.outbound, sprintf("jurisdictions.%s.outbound", [spec.data.origin]),
) if {
	transfer_out
	origin.outbound.assessment_required
	not adequate
	not "tia" in safeguards
	count({s | some s in origin.outbound.assessment_waived_by; s in safeguards}) == 0
}

# rule: XFER-FILING
# effect: review
# summary: the origin's law imposes a duty (a filing, a volume test) no spec field can show done
# facts: jurisdictions.*.outbound
reasons contains reason(
	"XFER-FILING", "review",
	sprintf("%s data to %s: %s", [spec.data.origin, dest_country, origin.outbound.always_review]),
	origin.outbound, sprintf("jurisdictions.%s.outbound", [spec.data.origin]),
) if {
	transfer_out
	origin.outbound.always_review
}

# rule: INBOUND-UNKNOWN
# effect: review
# summary: what the rented region's law says about foreign personal data is not on record
# facts: jurisdictions.*.inbound_rented_region
reasons contains reason(
	"INBOUND-UNKNOWN", "review",
	sprintf("%s has no rule on record for foreign personal data processed in a rented region (%s)", [
		dest_code, cand.region,
	]),
	dest, sprintf("jurisdictions.%s", [dest_code]),
) if {
	transfer_out
	dest
	not dest.inbound_rented_region
}

# -- where the data may go (read by the planner: burst/plan/placement.py) ------------------
# The localisation duties of the data's origin that cover its class: the data may not leave
# the origin's countries (whatever their confidence: an unsure duty is still not a licence).
localisation_duties contains {
	"fact": sprintf("jurisdictions.%s.localization.%s", [spec.data.origin, loc.id]),
	"stay_in": origin.countries,
	"effect": loc.effect,
	"confidence": loc.confidence,
	"source": source_of(loc),
} if {
	some loc in origin.localization
	spec.data.classification in loc.classes
	localization_applies(loc)
}

# record level: false when a localisation duty covers the data, or its origin is unknown
data_may_leave := false if {
	count(localisation_duties) > 0
} else := false if {
	not origin
} else := true
