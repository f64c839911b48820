output "node_group_name" {
  description = "Name of the (emulated) node group."
  value       = try(terraform_data.node_group.output.name, null)
}

output "node_names" {
  description = "Names of the emulated nodes."
  value       = [for n in terraform_data.node : n.output.name]
}

output "node_selector" {
  description = "Node selector the train step uses to land on this node group (as cloud_provider's stack outputs it)."
  value       = local.hybrid ? local.hybrid_labels : local.managed_selector
}

output "tolerations" {
  description = "Tolerations the train step needs for this node group's taints (as cloud_provider's stack outputs them)."
  value       = local.hybrid ? local.hybrid_tolerations : local.managed_tolerations
}

output "service_account" {
  description = "Kubernetes service account of the train pods (as the provider's stack outputs it)."
  value       = { namespace = "burst", name = "burst-${var.run_id}" }
}

output "service_account_annotations" {
  description = "Annotations of that service account, emulating the provider's pod identity."
  value       = local.emulated.annotations
}

output "checkpoint_uri" {
  description = "Where the provider's stack would put the run's checkpoints (emulated; the local run uses its own store)."
  value       = local.emulated.uri
}

output "vpn_status" {
  description = "Status of the (emulated) VPN."
  value       = try(terraform_data.vpn.output.name, null) == null ? null : "UP"
}

output "vpn_name" {
  description = "Name of the (emulated) VPN connection."
  value       = try(terraform_data.vpn.output.name, null)
}

output "region" {
  description = "Region the node group stands for."
  value       = var.region
}

output "tags" {
  description = "The tags every resource of the run carries."
  value       = local.tags
}

output "site" {
  description = "The site variables this attempt applied (JSON-encoded values), as recorded on the emulated node group."
  value       = try(terraform_data.node_group.output.site, {})
}
