# Provider terms and security features the data class needs.
package burst.preflight

provider := facts.providers[cand.provider]

# rule: PROV-CMK
# effect: deny when the provider has no customer-managed keys; review when that is unknown
# summary: the data class needs customer-managed keys (BYOK/CMK) from the provider
# facts: providers.*.customer_managed_keys
reasons contains reason(
	"PROV-CMK", effect,
	concat("", [sprintf("%s data needs customer-managed keys; %s: ", [spec.data.classification, cand.provider]), cmk_state]),
	provider.customer_managed_keys, sprintf("providers.%s.customer_managed_keys", [cand.provider]),
) if {
	data_class.requires_customer_managed_keys
	effect := cmk_effect
	effect != "allow"
}

cmk := provider.customer_managed_keys

cmk_effect := "deny" if {
	cmk.available == false
	not weak(cmk)
} else := "allow" if {
	cmk.available == true
	not weak(cmk)
	not stale(cmk)
} else := "review"

cmk_state := "none offered" if {
	cmk.available == false
} else := sprintf("not on record (confidence %s)", [cmk.confidence]) if {
	weak(cmk)
} else := sprintf("on record but not verified since %s", [cmk.last_verified])
