# The outputs contract every stack keeps (see docs/terraform.md): the train step reads
# them from the provision document.

output "region" {
  description = "Region of this attempt."
  value       = var.region
}

output "node_group_name" {
  description = "The run's main node pool."
  value       = try(google_container_node_pool.gpu.name, null)
}

output "node_selector" {
  description = "Node selector of the train step's pods."
  value       = { "accelerator" = var.accelerator, "burst/run-id" = var.run_id }
}

output "tolerations" {
  description = "Tolerations of the train step's pods (the nodes' taints)."
  value = concat(
    [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }],
    local.spot ? [{ key = "spot", operator = "Equal", value = "true", effect = "NoSchedule" }] : [],
  )
}

output "service_account" {
  description = "Kubernetes service account of the train step's pods (Workload Identity)."
  value       = { namespace = var.namespace, name = local.service_account }
}

output "service_account_annotations" {
  description = "Annotations the train pods' Kubernetes service account needs."
  value       = { "iam.gke.io/gcp-service-account" = try(google_service_account.pod.email, null) }
}

output "pod_identity" {
  description = "Cloud identity the train pods act as: the run's Google service account."
  value       = try(google_service_account.pod.email, null)
}

output "checkpoint_uri" {
  description = "Where the run's checkpoints go."
  value       = "gs://${google_storage_bucket.checkpoints.name}/${local.prefix}"
}

output "kms_key_id" {
  description = "Customer-managed key of the run's checkpoints."
  value       = var.kms_key_id
}

output "vpn_connection_id" {
  description = "The run's HA VPN gateway."
  value       = try(google_compute_ha_vpn_gateway.run.id, null)
}

output "vpn_status" {
  description = "Detailed status of each VPN tunnel."
  value       = try(google_compute_vpn_tunnel.tunnel[*].detailed_status, [])
}

output "tags" {
  description = "The run's tags (carried as GCP labels with normalised keys and values)."
  value       = local.tags
}
