# The verdict for one candidate: deny if any reason denies; review if any review is not
# waived by an exception in force; allow otherwise. Exceptions (policies/exceptions/*.yaml)
# waive only `review` reasons, only what they are bound to (the organisation by name and
# headquarters, and parent; the facts the reason cites; the regions and providers; optionally
# spec names, spec hashes, origins, classifications), and only between approved and expires.
package burst.preflight

in_scope(list, value) if "*" in list

in_scope(list, value) if value in list

# true/false versions (a function with only true bodies is undefined, not false, otherwise)
scoped(list, value) := true if {
	in_scope(list, value)
} else := false

norm(text) := lower(trim_space(text))

spec_sha256 := object.get(spec, "sha256", "")

# why a sign-off does not bind to this candidate: one entry per mismatch (empty: it binds)
mismatches(e) := found if {
	listed := mismatch_list(e)
	found := {m | some m in listed}
}

mismatch_list(e) := found if {
	# (rego-cpp 1.x: copy the argument before a comprehension uses it)
	x := e
	found := [m |
		some check in checks(x)
		check[0] == false
		m := check[1]
	]
}

checks(e) := [
	[norm(e.scope.organization.name) == norm(spec.organization.name), concat("", ["organisation '", spec.organization.name, "' is not '", e.scope.organization.name, "'"])],
	[e.scope.organization.headquarters == spec.organization.headquarters, concat("", ["headquarters ", spec.organization.headquarters, " is not ", e.scope.organization.headquarters])],
	[parent_ok(e), concat("", ["parent headquarters ", parent_text(object.get(spec.organization, "parent_headquarters", null)), " is not ", parent_text(object.get(e.scope.organization, "parent_headquarters", null))])],
	[scoped(e.scope.regions, cand.region), concat("", ["region ", cand.region, " is not in [", concat(", ", e.scope.regions), "]"])],
	[scoped(e.scope.providers, cand.provider), concat("", ["provider ", cand.provider, " is not in [", concat(", ", e.scope.providers), "]"])],
	[scoped(e.scope.specs, spec.name), concat("", ["spec name ", spec.name, " is not in [", concat(", ", e.scope.specs), "]"])],
	[scoped(e.scope.spec_sha256, spec_sha256), concat("", ["spec sha256 ", substring(spec_sha256, 0, 12), " is not one it was signed for"])],
	[scoped(e.scope.origins, spec.data.origin), concat("", ["origin ", spec.data.origin, " is not in [", concat(", ", e.scope.origins), "]"])],
	[scoped(e.scope.classifications, spec.data.classification), concat("", ["data class ", spec.data.classification, " is not in [", concat(", ", e.scope.classifications), "]"])],
]

parent_ok(e) := object.get(e.scope.organization, "parent_headquarters", null) == object.get(spec.organization, "parent_headquarters", null)

parent_text(p) := "none" if p == null else := p

# the sign-off is about this reason (same rule, a fact it names) ...
about(e, r) if {
	e.rule == r.rule
	r.fact in e.scope.facts
}

# why each exception does not bind here, computed once per exception (a rule is evaluated
# once per query; a function call is not cached)
exception_mismatches[e.id] := mismatches(e) if some e in data.exceptions

# ... and binds to this organisation, candidate and spec
exception_matches(e, r) if {
	about(e, r)
	count(exception_mismatches[e.id]) == 0
}

in_force(e) if {
	e.approved <= input.today
	input.today < e.expires
}

waivers contains {"rule": r.rule, "fact": r.fact, "exception": e.id, "expires": e.expires} if {
	some r in reasons
	r.effect == "review"
	some e in data.exceptions
	exception_matches(e, r)
	in_force(e)
}

waived contains [w.rule, w.fact] if some w in waivers

# rule: EXC-NOT-IN-FORCE
# effect: info
# summary: an exception matches a review but is expired (or not yet approved), so it is not honoured
notices contains {
	"rule": "EXC-NOT-IN-FORCE", "effect": "info",
	"message": sprintf("exception %s for %s is not in force (approved %s, expires %s, today %s): not honoured", [
		e.id, e.rule, e.approved, e.expires, input.today,
	]),
	"source": sprintf("policies/exceptions (approver %s)", [e.approver]),
	"fact": sprintf("exceptions.%s", [e.id]),
} if {
	some r in reasons
	r.effect == "review"
	some e in data.exceptions
	exception_matches(e, r)
	not in_force(e)
}

# rule: EXC-NOT-APPLICABLE
# effect: info
# summary: an exception is about a review reason (its rule and fact) of a candidate that is not denied, but is bound to another organisation, region, provider or spec: it does not apply, and the record names the mismatch
notices contains {
	"rule": "EXC-NOT-APPLICABLE", "effect": "info",
	"message": concat("", [
		"exception ", e.id, " (", e.rule, " for ", r.fact, ") does not apply: ",
		concat("; ", sort(exception_mismatches[e.id])),
	]),
	"source": sprintf("policies/exceptions (approver %s)", [e.approver]),
	"fact": sprintf("exceptions.%s", [e.id]),
} if {
	verdict != "deny" # a sign-off could not have helped a denied candidate: no note
	some r in reasons
	r.effect == "review"
	some e in data.exceptions
	about(e, r)
	count(exception_mismatches[e.id]) > 0
}

blocking contains r if {
	some r in reasons
	r.effect == "deny"
}

blocking contains r if {
	some r in reasons
	r.effect == "review"
	not [r.rule, r.fact] in waived
}

verdict := "deny" if {
	some r in blocking
	r.effect == "deny"
} else := "review" if {
	count(blocking) > 0
} else := "allow"

# Reasons about moving the data itself: while one of them blocks, the data may not be moved
# to this candidate (the planner never plans a transfer there; training where the data
# already is stays possible).
residency_rules := {
	"RES-LOCALIZATION", "XFER-NO-SAFEGUARD", "XFER-ASSESSMENT", "XFER-FILING",
	"XFER-OUTBOUND-UNKNOWN", "INBOUND-UNKNOWN", "ORIGIN-UNKNOWN", "CLASS-UNKNOWN",
	"STORAGE-UNKNOWN", "EXP-DATA-CONTROLLED", "XFER-IMPORTANT-DATA",
	"RES-LOCALIZATION-UNKNOWN",
}

# a review because a residency fact (a jurisdiction's outbound, inbound or localisation fact)
# is unsure or stale blocks moving the data as well: whether it may move is then unknown
unsure_residency_fact(r) if {
	r.rule in {"FACT-LOW-CONFIDENCE", "FACT-STALE"}
	startswith(r.fact, "jurisdictions.")
}

data_may_move := false if {
	verdict == "deny"
} else := false if {
	some r in blocking
	r.rule in residency_rules
} else := false if {
	some r in blocking
	unsure_residency_fact(r)
} else := true

# every location the data is stored in today, and whether using this candidate moves it
# across a border (only then does data_may_move matter for it)
sources contains {
	"region": r, "country": object.get(storage_countries, r, "unknown"),
	"moves": r in object.keys(moved_from), "may_move": may_move_from(r),
} if some r in storage_regions

may_move_from(r) := true if {
	not r in object.keys(moved_from)
	storage_countries[r]
} else := data_may_move

decision := {
	"verdict": verdict,
	"reasons": reasons | notices,
	"waivers": waivers,
	"satisfied": satisfied,
	"sources": sources,
	"data_may_move": data_may_move,
	"data_may_leave": data_may_leave,
	"localisation": localisation_duties,
}
