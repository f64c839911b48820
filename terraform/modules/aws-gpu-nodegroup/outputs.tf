output "node_group_name" {
  description = "Name of the main (spot or on-demand) node group."
  value       = try(aws_eks_node_group.main.node_group_name, null)
}

output "on_demand_node_group_name" {
  description = "Name of the on-demand floor node group, or null without one."
  value       = try(aws_eks_node_group.on_demand_floor[0].node_group_name, null)
}

output "node_selector" {
  description = "Node selector the train step uses to land on this run's nodes."
  # burst/capacity too (not with an on-demand floor, whose pods may land on either group):
  # Kueue picks a ResourceFlavor by the pod's selector and pins the pod to its nodeLabels
  # (deploy/kueue, docs/reference/walk-kueue.md S1)
  value = merge(
    { "accelerator" = var.accelerator, "burst/run-id" = var.run_id },
    var.capacity_type == "SPOT" && var.on_demand_floor > 0 ? {} : { "burst/capacity" = lower(var.capacity_type) },
  )
}

output "tolerations" {
  description = "Tolerations the train step needs for the nodes' taints."
  value = concat(
    [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }],
    var.capacity_type == "SPOT" ? [{ key = "spot", operator = "Equal", value = "true", effect = "NoSchedule" }] : [],
  )
}

output "security_group_id" {
  description = "Security group of the nodes."
  value       = try(aws_security_group.nodes.id, null)
}

output "launch_template_id" {
  description = "Launch template of the nodes (IMDSv2 required, encrypted volumes)."
  value       = try(aws_launch_template.nodes.id, null)
}
