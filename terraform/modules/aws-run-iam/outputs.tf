output "pod_role_arn" {
  description = "ARN of the run's pod role; annotate the service account with eks.amazonaws.com/role-arn."
  value       = try(aws_iam_role.pod.arn, null)
}

output "service_account" {
  description = "Namespace and name of the service account the pod role trusts."
  value       = { namespace = var.namespace, name = local.service_account }
}

output "node_role_arn" {
  description = "ARN of the node group's EC2 role, or null when create_node_role is false."
  value       = try(aws_iam_role.node[0].arn, null)
}
