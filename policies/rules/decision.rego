# The verdict for one candidate: deny if any reason denies; review if any review is not
# waived by an exception in force; allow otherwise. Exceptions (policies/exceptions/*.yaml)
# waive only `review` reasons, only in their scope (regions, providers, specs, origins,
# classifications, and the facts a reason cites), and only between approved and expires.
package burst.preflight

in_scope(list, value) if "*" in list

in_scope(list, value) if value in list

exception_matches(e, r) if {
	e.rule == r.rule
	in_scope(e.scope.regions, cand.region)
	in_scope(e.scope.providers, cand.provider)
	in_scope(e.scope.specs, spec.name)
	in_scope(e.scope.origins, spec.data.origin)
	in_scope(e.scope.classifications, spec.data.classification)
	in_scope(e.scope.facts, r.fact)
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
}

data_may_move := false if {
	verdict == "deny"
} else := false if {
	some r in blocking
	r.rule in residency_rules
} else := true

decision := {
	"verdict": verdict,
	"reasons": reasons | notices,
	"waivers": waivers,
	"data_may_move": data_may_move,
	"data_may_leave": data_may_leave,
	"localisation": localisation_duties,
}
