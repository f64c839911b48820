# Rego unit tests of helper functions (no `with`: see burst/policy/testing.py).
package burst.preflight_test

import data.burst.preflight

test_scope_wildcard_matches_anything if preflight.in_scope(["*"], "me-central-1")

test_scope_list_matches_member if preflight.in_scope(["ap-southeast-1"], "ap-southeast-1")

test_scope_list_rejects_other if not preflight.in_scope(["ap-southeast-1"], "me-central-1")

test_weak_confidence if {
	preflight.weak({"confidence": "low"})
	preflight.weak({"confidence": "unknown"})
	not preflight.weak({"confidence": "med"})
}

test_source_falls_back_to_fact_sheet if {
	preflight.source_of({"source": []}) == preflight.fact_sheet
	preflight.source_of({"source": ["https://example.org/a"]}) == "https://example.org/a"
}

test_short_truncates_long_text if {
	count(preflight.short(concat("", ["x" | some _ in numbers.range(1, 200)]))) == 93
}
