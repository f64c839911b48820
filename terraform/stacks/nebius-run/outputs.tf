# The outputs contract every stack keeps (see docs/terraform.md): the train step reads
# them from the provision document.

output "region" {
  description = "Region of this attempt."
  value       = var.region
}

output "node_group_name" {
  description = "The run's first node instance (the run's instances are named after it; they join the home cluster)."
  value       = try(nebius_compute_v1_instance.gpu[keys(local.nodes)[0]].name, null)
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
  description = "Kubernetes service account of the train step's pods."
  value       = { namespace = var.namespace, name = local.service_account }
}

output "service_account_annotations" {
  description = "Annotations of the train pods' service account: none (Nebius has no annotation convention; the pods exchange their projected token for the service account's, see workload identity in the README)."
  value       = {}
}

output "pod_identity" {
  description = "Nebius service account the train pods act as (federated credentials trust the home cluster's token issuer for the run's Kubernetes service account only)."
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
