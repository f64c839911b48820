output "node_group_name" {
  description = "Name of the (emulated) node group."
  value       = try(terraform_data.node_group.output.name, null)
}

output "node_names" {
  description = "Names of the emulated nodes."
  value       = [for n in terraform_data.node : n.output.name]
}

output "node_selector" {
  description = "Node selector the train step uses to land on this node group."
  value       = { "accelerator" = var.gpu_type, "burst/run-id" = var.run_id }
}

output "tolerations" {
  description = "Tolerations the train step needs for this node group's taints."
  value = concat(
    [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }],
    var.capacity == "on_demand" ? [] : [{ key = "spot", operator = "Equal", value = "true", effect = "NoSchedule" }],
  )
}

output "vpn_name" {
  description = "Name of the (emulated) VPN connection."
  value       = try(terraform_data.vpn.output.name, null)
}

output "region" {
  description = "Region the node group stands for."
  value       = var.region
}

output "tags" {
  description = "The tags every resource of the run carries."
  value       = local.tags
}
