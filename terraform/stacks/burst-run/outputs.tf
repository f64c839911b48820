# The same output names as the local stack where they mean the same thing: the train
# step reads them from the provision document.

output "region" {
  description = "Region of this attempt."
  value       = var.region
}

output "node_group_name" {
  description = "The run's main node group."
  value       = try(module.nodegroup.node_group_name, null)
}

output "node_selector" {
  description = "Node selector of the train step's pods."
  # the region too: Kueue's ResourceFlavors name it (docs/reference/walk-kueue.md S1)
  value = try(merge(module.nodegroup.node_selector, { "topology.kubernetes.io/region" = var.region }), null)
}

output "tolerations" {
  description = "Tolerations of the train step's pods."
  value       = try(module.nodegroup.tolerations, [])
}

output "service_account" {
  description = "Service account of the train step's pods (IRSA)."
  value       = try(module.iam.service_account, null)
}

output "pod_role_arn" {
  description = "Role the service account is annotated with."
  value       = try(module.iam.pod_role_arn, null)
}

output "checkpoint_uri" {
  description = "Where the run's checkpoints go."
  value       = try(module.checkpoints.checkpoint_uri, null)
}

output "kms_key_arn" {
  description = "Key of the run's checkpoints."
  value       = try(module.checkpoints.kms_key_arn, null)
}

output "vpn_connection_id" {
  description = "The run's site-to-site VPN connection."
  value       = try(module.vpn.vpn_connection_id, null)
}

output "service_account_annotations" {
  description = "Annotations the train pods' Kubernetes service account needs (IRSA)."
  value       = { "eks.amazonaws.com/role-arn" = try(module.iam.pod_role_arn, null) }
}

output "pod_identity" {
  description = "Cloud identity the train pods act as: the run's pod role."
  value       = try(module.iam.pod_role_arn, null)
}

output "kms_key_id" {
  description = "Customer-managed key of the run's checkpoints (as kms_key_arn)."
  value       = try(module.checkpoints.kms_key_arn, null)
}

output "vpn_status" {
  description = "Status of each tunnel of the run's VPN connection."
  value       = try(module.vpn.tunnel_status, [])
}

output "tags" {
  description = "The tags every resource of the run carries."
  value       = local.tags
}
