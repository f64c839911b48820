# The node-join contract (docs/topology.md, "Outputs contract"): every stack whose nodes
# join the home cluster reports these under the same names.

output "join_method" {
  description = "How the nodes join the home cluster: eks-hybrid-ssm (nodeadm with an SSM hybrid activation)."
  value       = "eks-hybrid-ssm"
}

output "cluster_name" {
  description = "The home cluster the nodes join."
  value       = var.cluster_name
}

output "cluster_region" {
  description = "Region of the home cluster."
  value       = try(data.aws_region.current.region, null)
}

output "cluster_endpoint" {
  description = "API server endpoint of the home cluster (reached over the VPN)."
  value       = try(data.aws_eks_cluster.home.endpoint, null)
}

output "node_role_arn" {
  description = "The role the joined nodes act as (access entry type HYBRID_LINUX)."
  value       = try(aws_iam_role.node.arn, null)
}

output "ssm_activation_id" {
  description = "The SSM hybrid activation the nodes register with."
  value       = try(aws_ssm_activation.nodes.id, null)
}

output "ssm_activation_code" {
  description = "The activation's code (secret: it lets a machine register as one of the run's nodes until the run expires)."
  value       = try(aws_ssm_activation.nodes.activation_code, null)
  sensitive   = true
}

output "nodeadm_config" {
  description = "nodeadm NodeConfig (YAML) a rented node bootstraps with: the cluster, the activation, the run's labels and taints. Secret (carries the activation code)."
  sensitive   = true
  value       = try(local.nodeadm_config, null)
}

output "user_data" {
  description = "cloud-init user data of a rented node: writes nodeadm_config (root only), downloads nodeadm, installs the home cluster's Kubernetes version with the SSM credential provider and joins (nodeadm init). Secret (carries the activation code)."
  sensitive   = true
  value = try(join("\n", ["#cloud-config", yamlencode({
    write_files = [{
      path        = "/etc/burst/nodeadm.yaml"
      owner       = "root:root"
      permissions = "0600"
      content     = local.nodeadm_config
    }]
    runcmd = [
      ["curl", "-fsSL", "--retry", "5", "-o", "/usr/local/bin/nodeadm", var.nodeadm_url],
      ["chmod", "0755", "/usr/local/bin/nodeadm"],
      ["/usr/local/bin/nodeadm", "install", local.k8s_version, "--credential-provider", "ssm"],
      ["/usr/local/bin/nodeadm", "init", "--config-source", "file:///etc/burst/nodeadm.yaml"],
    ]
  })]), null)
}

output "kubernetes_version" {
  description = "Kubernetes version nodeadm installs on the nodes (the home cluster's unless kubernetes_version is set)."
  value       = local.k8s_version
}

output "oidc_issuer_url" {
  description = "The home cluster's service-account token issuer: other clouds' workload identity federation trusts it for the train pods."
  value       = try(data.aws_eks_cluster.home.identity[0].oidc[0].issuer, null)
}

output "node_selector" {
  description = "Node selector of the train step's pods on the joined nodes."
  value       = merge(local.labels, { "eks.amazonaws.com/compute-type" = "hybrid" })
}

output "tolerations" {
  description = "Tolerations of the train step's pods for the joined nodes' taints."
  value = [for t in local.taints : {
    key      = split("=", t)[0]
    operator = "Equal"
    value    = split(":", split("=", t)[1])[0]
    effect   = split(":", t)[1]
  }]
}

output "remote_node_cidrs" {
  description = "The site networks the nodes join from (routed home over the VPN)."
  value       = var.remote_node_cidrs
}

output "remote_pod_cidrs" {
  description = "The site pod networks (routed home over the VPN), if any."
  value       = var.remote_pod_cidrs
}
