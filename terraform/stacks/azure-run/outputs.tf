# The outputs contract every stack keeps (see docs/terraform.md): the train step reads
# them from the provision document.

output "region" {
  description = "Region of this attempt."
  value       = var.region
}

output "node_group_name" {
  description = "The run's main node pool."
  value       = try(azurerm_kubernetes_cluster_node_pool.gpu.name, null)
}

output "node_selector" {
  description = "Node selector of the train step's pods."
  value       = { "accelerator" = var.accelerator, "burst/run-id" = var.run_id }
}

output "tolerations" {
  description = "Tolerations of the train step's pods (the nodes' taints; AKS taints Spot pools itself)."
  value = concat(
    [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }],
    local.spot ? [{ key = "kubernetes.azure.com/scalesetpriority", operator = "Equal", value = "spot", effect = "NoSchedule" }] : [],
  )
}

output "service_account" {
  description = "Kubernetes service account of the train step's pods (workload identity)."
  value       = { namespace = var.namespace, name = local.service_account }
}

output "service_account_annotations" {
  description = "Annotations the train pods' Kubernetes service account needs (and the pods the label azure.workload.identity/use=true)."
  value       = { "azure.workload.identity/client-id" = try(azurerm_user_assigned_identity.pod.client_id, null) }
}

output "pod_identity" {
  description = "Cloud identity the train pods act as: the run's user-assigned identity."
  value       = try(azurerm_user_assigned_identity.pod.id, null)
}

output "checkpoint_uri" {
  description = "Where the run's checkpoints go (az://account/container/prefix)."
  value       = "az://${azurerm_storage_account.checkpoints.name}/${local.container}/${local.prefix}"
}

output "kms_key_id" {
  description = "Customer-managed key of the run's checkpoints."
  value       = var.key_vault_key_id
}

output "vpn_connection_id" {
  description = "The run's site-to-site VPN connection."
  value       = try(azurerm_virtual_network_gateway_connection.control.id, null)
}

output "vpn_status" {
  description = "Not exposed by the azurerm provider: `az network vpn-connection show --query connectionStatus` reads it."
  value       = null
}

output "tags" {
  description = "The tags every resource of the run carries."
  value       = local.tags
}
