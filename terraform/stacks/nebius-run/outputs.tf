# The outputs contract every stack keeps (see docs/terraform.md): the train step reads
# them from the provision document.

output "region" {
  description = "Region of this attempt."
  value       = var.region
}

output "node_group_name" {
  description = "The run's main node group."
  value       = try(nebius_mk8s_v1_node_group.gpu.name, null)
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
  description = "Kubernetes service account of the train step's pods."
  value       = { namespace = var.namespace, name = local.service_account }
}

output "service_account_annotations" {
  description = "Annotations of the train pods' service account: none (Nebius has no annotation convention; the pods exchange their projected token for the service account's, see workload identity in the README)."
  value       = {}
}

output "pod_identity" {
  description = "Nebius service account the train pods act as (federated credentials trust the cluster's token issuer for the run's Kubernetes service account only)."
  value       = try(nebius_iam_v1_service_account.pod.id, null)
}

output "checkpoint_uri" {
  description = "Where the run's checkpoints go (S3 API at https://storage.<region>.nebius.cloud)."
  value       = "s3://${nebius_storage_v1_bucket.checkpoints.name}/${local.prefix}"
}

output "kms_key_id" {
  description = "None: the provider offers no customer-managed key for buckets or node-group boot disks (storage_v1_bucket has no encryption argument; disk_encryption exists on compute_v1_disk only)."
  value       = null
}

output "vpn_connection_id" {
  description = "The site's VPN gateway to the control network."
  value       = var.vpn.gateway_id
}

output "vpn_status" {
  description = "Not exposed by the provider for a site gateway VM."
  value       = null
}

output "tags" {
  description = "The run's tags (carried as labels with normalised keys and values)."
  value       = local.tags
}
