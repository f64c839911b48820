# The outputs contract every stack keeps (see docs/terraform.md): the train step reads
# them from the provision document.

output "region" {
  description = "Region of this attempt."
  value       = var.region
}

output "node_group_name" {
  description = "The run's main VM scale set (its VMs join the home cluster)."
  value       = try(azurerm_linux_virtual_machine_scale_set.gpu["main"].name, null)
}

output "node_selector" {
  description = "Node selector of the train step's pods (the joined nodes' labels)."
  value       = module.home.node_selector
}

output "tolerations" {
  description = "Tolerations of the train step's pods (the joined nodes' taints: nvidia.com/gpu and the run's)."
  value       = module.home.tolerations
}

output "service_account" {
  description = "Kubernetes service account of the train step's pods (workload identity)."
  value       = { namespace = var.namespace, name = local.service_account }
}

output "service_account_annotations" {
  description = "Annotations the train pods' Kubernetes service account needs (and the pods the label azure.workload.identity/use=true; the home cluster runs the Azure workload identity webhook, or the pod sets AZURE_CLIENT_ID and a projected token itself)."
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

# The node-join contract (docs/topology.md, "Outputs contract"), from the home side.

output "join_method" {
  description = "How the nodes join the home cluster (eks-hybrid-ssm)."
  value       = module.home.join_method
}

output "cluster_name" {
  description = "The home cluster the nodes join."
  value       = module.home.cluster_name
}

output "cluster_region" {
  description = "Region of the home cluster."
  value       = module.home.cluster_region
}

output "cluster_endpoint" {
  description = "API server endpoint of the home cluster (reached over the VPN)."
  value       = module.home.cluster_endpoint
}

output "node_role_arn" {
  description = "The role the joined nodes act as (access entry HYBRID_LINUX)."
  value       = module.home.node_role_arn
}

output "nodeadm_config" {
  description = "The NodeConfig the nodes bootstrap with (secret: carries the activation code)."
  value       = module.home.nodeadm_config
  sensitive   = true
}

output "ssm_activation_id" {
  description = "The SSM hybrid activation the nodes register with."
  value       = module.home.ssm_activation_id
}

output "ssm_activation_code" {
  description = "The activation's code (secret)."
  value       = module.home.ssm_activation_code
  sensitive   = true
}

output "remote_node_cidrs" {
  description = "The site networks the nodes join from."
  value       = module.home.remote_node_cidrs
}

output "remote_pod_cidrs" {
  description = "The site pod networks, if any."
  value       = module.home.remote_pod_cidrs
}
