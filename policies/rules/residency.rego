# Data residency: localization duties of the data's origin (and of a free zone's host
# country), the transfer rules of every country the data leaves (its origin, and every country
# a shard or the dataset is stored in today), and what the law of the rented region's country
# says about foreign data processed there.
package burst.preflight

# -- localisation duties ----------------------------------------------------------------------
# Each duty: the fact it rests on, the countries the data must stay in, its effect.
# The origin's own duties:
duties contains {
	"id": sprintf("jurisdictions.%s.localization.%s", [spec.data.origin, loc.id]),
	"duty": loc.id, "fact": loc, "stay_in": origin.countries, "effect": loc.effect,
	"rule": loc.rule, "basis": "origin",
} if {
	some loc in origin.localization
	spec.data.classification in loc.classes
	localization_applies(loc)
}

# A free zone's host-country duties: whether they bind the free zone is its own fact
# (host_localization). Unknown or low confidence: the duty reviews (never allows); a fact
# that settles it with high/med confidence gives the host duty its own effect.
duties contains {
	"id": sprintf("jurisdictions.%s.host_localization", [spec.data.origin]),
	"duty": concat("", [host_code, ".", loc.id]), "fact": origin.host_localization,
	"stay_in": host.countries, "effect": loc.effect, "rule": loc.rule, "basis": "host",
} if {
	host_code := jurisdiction_of(origin.host)
	host := facts.jurisdictions[host_code]
	some loc in host.localization
	spec.data.classification in loc.classes
	localization_applies(loc)
}

# A storage country's own duties: data stored today in a country other than its origin (a
# shard, or data.region) and moved out of it by this candidate. Whether that country's duty
# binds data that comes from elsewhere is not settled by the fact sheet (the UAE's Art.13
# binds "health data tied to services provided in the UAE", whatever its origin code), so
# such a duty reviews: never allow, never a silent pass.
duties contains {
	"id": concat("", ["jurisdictions.", code, ".localization.", loc.id]),
	"duty": concat("", [code, ".", loc.id]), "fact": loc, "stay_in": j.countries,
	"effect": "review", "rule": loc.rule, "basis": "storage", "via": r,
} if {
	some r, c in moved_from
	code := jurisdiction_of(c)
	code != spec.data.origin
	j := facts.jurisdictions[code]
	some loc in j.localization
	spec.data.classification in loc.classes
	localization_applies(loc)
}

# the jurisdictions of the countries the data is moved out of because it is stored there
# (other than its origin): their localisation facts bear on the move as the origin's do
storage_left contains code if {
	some _, c in moved_from
	code := jurisdiction_of(c)
	code != spec.data.origin
}

localization_applies(loc) if not loc.headquarters_in

localization_applies(loc) if spec.organization.headquarters in loc.headquarters_in

stay_in_text(countries) := concat("/", countries) if {
	count(countries) > 0
} else := "the free zone"

# rule: RES-LOCALIZATION
# effect: deny (as the fact says; review when its confidence is low or unknown)
# summary: a localisation duty (of the origin, or of a free zone's host country) keeps this data class in its countries
# facts: jurisdictions.*.localization, jurisdictions.*.host_localization
reasons contains reason(
	"RES-LOCALIZATION", effect_of(d.fact, d.effect),
	concat("", [
		sprintf("%s %s data must stay in ", [spec.data.origin, spec.data.classification]),
		stay_in_text(d.stay_in), " (localisation duty ", d.duty,
		host_note(d),
		sprintf("); %s is in %s", [cand.region, dest_country]),
	]),
	d.fact, d.id,
) if {
	region
	some d in duties
	not dest_country in d.stay_in
}

host_note(d) := concat("", [
	"; whether it binds the free zone is ", d.fact.confidence, " confidence",
]) if {
	d.basis == "host"
} else := concat("", [
	"; the data is stored there (", d.via, ") but comes from ", spec.data.origin,
	": whether the duty binds it is not settled",
]) if {
	d.basis == "storage"
} else := ""

# -- transfers ----------------------------------------------------------------------------------
transfer_out if {
	personal
	leaves_origin
}

# Every border the personal data crosses to reach the candidate, with the jurisdiction whose
# outbound rules govern the crossing: the origin's (the data is outside its origin there), and
# the storage country's for every location the data is moved out of (a shard stored in X
# moved to the candidate is a transfer out of X).
transfers contains {"from": spec.data.origin, "via": "origin", "country": spec.data.origin} if transfer_out

transfers contains {"from": code, "via": r, "country": c} if {
	personal
	some r, c in moved_from
	code := jurisdiction_of(c)
	not same_as_origin_transfer(code)
}

# a storage country with no jurisdiction on record: its outbound rules are unknown
transfers contains {"from": "", "via": r, "country": c} if {
	personal
	some r, c in moved_from
	not jurisdiction_of(c)
}

same_as_origin_transfer(code) if {
	transfer_out
	code == spec.data.origin
}

via_text(t) := "" if {
	t.via == "origin"
} else := concat("", [" (stored in ", t.via, ", ", t.country, ")"])

adequate_for(t) if dest_country in facts.jurisdictions[t.from].outbound.adequate_destinations

# (rego-cpp 1.x: a function argument used inside a comprehension is not bound; copy it
# into a local variable first)
safeguards_for(t) := found if {
	accepted := facts.jurisdictions[t.from].outbound.accepted_safeguards
	found := {s |
		some s in accepted
		s in safeguards
	}
}

# rule: XFER-OUTBOUND-UNKNOWN
# effect: review
# summary: personal data leaves a country whose outbound rule is not recorded
# facts: jurisdictions.*.outbound
reasons contains reason(
	"XFER-OUTBOUND-UNKNOWN", "review",
	concat("", [
		t.country, " has no outbound transfer rule on record; ",
		sprintf("%s data", [spec.data.classification]), via_text(t),
		sprintf(" to %s cannot be assessed", [dest_country]),
	]),
	object.get(facts.jurisdictions, t.from, {"source": [fact_sheet]}), concat("", ["jurisdictions.", unknown_code(t)]),
) if {
	some t in transfers
	not facts.jurisdictions[t.from].outbound
}

unknown_code(t) := t.from if t.from != "" else := t.country

# rule: XFER-NO-SAFEGUARD
# effect: deny
# summary: personal data leaves its origin or a storage country without a transfer safeguard that country's law accepts
# facts: jurisdictions.*.outbound
reasons contains reason(
	"XFER-NO-SAFEGUARD", "deny",
	concat("", [
		t.from, " personal data", via_text(t),
		sprintf(" to %s (%s) needs one of [", [dest_country, cand.region]),
		concat(", ", j.outbound.accepted_safeguards),
		"] in data.transfer_safeguards",
	]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound.safeguard_required
	not adequate_for(t)
	count(safeguards_for(t)) == 0
}

# rule: XFER-ASSESSMENT
# effect: review
# summary: the law of a country the data leaves also needs a transfer impact / risk assessment ('tia') on record
# facts: jurisdictions.*.outbound
reasons contains reason(
	"XFER-ASSESSMENT", "review",
	concat("", [
		t.from, sprintf(" requires a transfer impact/risk assessment for %s data", [spec.data.classification]),
		via_text(t),
		sprintf(" to %s: add 'tia' to data.transfer_safeguards once done", [dest_country]),
	]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound.assessment_required
	not adequate_for(t)
	not "tia" in safeguards
	count({s |
		some s in j.outbound.assessment_waived_by
		s in safeguards
	}) == 0
}

# rule: XFER-FILING
# effect: review
# summary: the law of a country the data leaves imposes a duty (a filing, a volume test) no spec field can show done
# facts: jurisdictions.*.outbound
reasons contains reason(
	"XFER-FILING", "review",
	concat("", [t.from, " data", via_text(t), sprintf(" to %s: ", [dest_country]), j.outbound.always_review]),
	j.outbound, concat("", ["jurisdictions.", t.from, ".outbound"]),
) if {
	some t in transfers
	j := facts.jurisdictions[t.from]
	j.outbound.always_review
}

# -- classes whose localisation must be on record ------------------------------------------
# For some classes (government data) the fact sheet gives hosting rules for a few countries
# only (AE, SA, ID; SG's "sectoral" entry reviews). Leaving any other jurisdiction is then
# unknown, not free: review.
class_localisation_on_record(code) if {
	some loc in facts.jurisdictions[code].localization
	spec.data.classification in loc.classes
}

# a free zone: its host's duty for the class (reviewed through host_localization)
class_localisation_on_record(code) if {
	code == spec.data.origin
	some d in duties
	d.basis == "host"
}

class_localisation_unknown contains spec.data.origin if {
	data_class.localisation_fact_required
	leaves_origin
	not class_localisation_on_record(spec.data.origin)
}

class_localisation_unknown contains code if {
	data_class.localisation_fact_required
	some code in storage_left
	not class_localisation_on_record(code)
}

# rule: RES-LOCALIZATION-UNKNOWN
# effect: review
# summary: data of a class whose localisation rules the facts cover only for some countries (government) leaves a jurisdiction with no such fact on record
# facts: jurisdictions.*.localization
reasons contains reason(
	"RES-LOCALIZATION-UNKNOWN", "review",
	concat("", [
		code, sprintf(" has no localisation fact on record for %s data: whether it may leave for %s (%s) is unknown", [
			spec.data.classification, dest_country, cand.region,
		]),
	]),
	object.get(facts.jurisdictions, code, {"source": [fact_sheet]}), concat("", ["jurisdictions.", code, ".localization"]),
) if {
	some code in class_localisation_unknown
}

# -- important / core data --------------------------------------------------------------------
# Some jurisdictions regulate the export of non-personal data too (China: any 'important
# data' needs a CAC security assessment; Vietnam: important/core data under the Data Law needs
# an assessment before it crosses the border). Whether a dataset is important data is not in
# the spec, so data of a class the regime may cover that leaves such a jurisdiction (its
# origin, or a country it is stored in) reviews.
important_data_from contains spec.data.origin if {
	leaves_origin
	origin.important_data
}

important_data_from contains code if {
	some code in storage_left
	facts.jurisdictions[code].important_data
}

# rule: XFER-IMPORTANT-DATA
# effect: review
# summary: data leaves a jurisdiction that regulates the export of important/core data (CN, VN) and the spec cannot show it is not such data
# facts: jurisdictions.*.important_data
reasons contains reason(
	"XFER-IMPORTANT-DATA", "review",
	concat("", [
		code, sprintf(" %s data leaving for %s (%s) may be important/core data: ", [spec.data.classification, dest_country, cand.region]),
		short(j.important_data.rule),
	]),
	j.important_data, concat("", ["jurisdictions.", code, ".important_data"]),
) if {
	some code in important_data_from
	j := facts.jurisdictions[code]
	spec.data.classification in j.important_data.classes
}

# foreign personal data is processed in the candidate's country
foreign_personal_here if count(transfers) > 0

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
	foreign_personal_here
	dest
	not dest.inbound_rented_region
}

# -- where the data may go (read by the planner: burst/plan/placement.py) ------------------
# The localisation duties that cover the data: it may not leave those countries (whatever
# their confidence: an unsure duty is still not a licence).
localisation_duties contains {
	"fact": d.id,
	"stay_in": d.stay_in,
	"effect": d.effect,
	"confidence": d.fact.confidence,
	"source": source_of(d.fact),
} if {
	some d in duties
}

# record level: false when a localisation duty covers the data, its origin is unknown, or
# what the sources say about localisation there is unsure or stale (fail closed; a decision's
# data_may_move, which honours sign-offs, is what the planner reads first)
data_may_leave := false if {
	count(localisation_duties) > 0
} else := false if {
	not origin
} else := false if {
	weak(origin.localization_general)
} else := false if {
	stale(origin.localization_general)
} else := true
