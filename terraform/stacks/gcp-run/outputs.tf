# The outputs contract every stack keeps (see docs/terraform.md): the train step reads
# them from the provision document.

output "region" {
  description = "Region of this attempt."
  value       = var.region
}

output "node_group_name" {
  description = "The run's main managed instance group (its VMs join the home cluster)."
  value       = try(google_compute_instance_group_manager.gpu["main"].name, null)
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
  description = "Kubernetes service account of the train step's pods (in the home cluster; federated)."
  value       = { namespace = var.namespace, name = local.service_account }
}

output "service_account_annotations" {
  description = "Annotations the train pods' Kubernetes service account needs: none (federation is by token exchange; see workload_identity_provider)."
  value       = {}
}

output "workload_identity_provider" {
  description = "The run's workload identity pool provider: a train pod exchanges its home-cluster token (audience: this name) for the run's service account (pod_identity)."
  value       = try(google_iam_workload_identity_pool_provider.home.name, null)
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
