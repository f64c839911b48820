################################################################################
# local-nodegroup: the embedded default. It stands for an ephemeral GPU node group
# and its VPN with builtin terraform_data resources only, so `burst run` applies and
# destroys real Terraform state on a laptop or a CI machine with no cloud account.
#
# It can also emulate the failures the driver must handle, at APPLY time, after some
# resources already exist (so failover and teardown have real state to clean up):
#   simulate_no_capacity  regions where creating the node group fails with
#                         InsufficientInstanceCapacity (the driver fails over);
#   fail_midway           the node group fails with an injected, non-capacity error
#                         (the run stops; teardown destroys what exists).
################################################################################

locals {
  tags = merge(var.tags, { "burst:run-id" = var.run_id })
  node_labels = {
    "accelerator"     = var.gpu_type
    "burst/run-id"    = var.run_id
    "burst/capacity"  = var.capacity
    "topology/region" = var.region
  }
  no_capacity = contains(var.simulate_no_capacity, var.region)

  # Each provider's own words for "no capacity here" (burst.infra.terraform.CAPACITY_PATTERNS
  # classifies them all as capacity errors, so failover across providers rehearses here).
  capacity_errors = {
    aws    = "InsufficientInstanceCapacity: We currently do not have sufficient ${var.gpu_type} capacity in the Availability Zone you requested (${var.region})"
    gcp    = "ZONE_RESOURCE_POOL_EXHAUSTED: The zone '${var.region}-a' does not have enough resources available to fulfill the request"
    azure  = "AllocationFailed: Allocation failed. We do not have sufficient capacity for the requested VM size in this region (${var.region})"
    nebius = "RESOURCE_EXHAUSTED: not enough resources for platform ${var.gpu_type} in ${var.region}"
    oci    = "Out of host capacity. (${var.region})"
  }
  capacity_error = lookup(local.capacity_errors, var.cloud_provider, local.capacity_errors["aws"])

  # Each provider's outputs, emulated with the same names and shapes as its stack's
  spot_toleration = { key = "spot", operator = "Equal", value = "true", effect = "NoSchedule" }
  # the gcp, azure and nebius stacks' VMs join the home cluster as EKS hybrid nodes
  # (aws-hybrid-join): labels and taints are the run's, whatever the capacity
  hybrid = contains(["gcp", "azure", "nebius"], var.cloud_provider)
  hybrid_selector = {
    "accelerator"                    = var.gpu_type
    "burst/capacity"                 = var.capacity
    "burst/run-id"                   = var.run_id
    "eks.amazonaws.com/compute-type" = "hybrid"
  }
  hybrid_tolerations = [
    { key = "nvidia.com/gpu", operator = "Equal", value = "present", effect = "NoSchedule" },
    { key = "burst/run-id", operator = "Equal", value = var.run_id, effect = "NoSchedule" },
  ]
  identity = {
    aws    = { annotations = { "eks.amazonaws.com/role-arn" = "arn:aws:iam::local:role/burst-${var.run_id}-pod" }, uri = "s3://burst-${var.run_id}-ckpt/runs/${var.run_id}/" }
    gcp    = { annotations = {}, uri = "gs://burst-${var.run_id}-ckpt/runs/${var.run_id}/" }
    azure  = { annotations = { "azure.workload.identity/client-id" = "local-client-id" }, uri = "az://burst${var.run_id}/checkpoints/runs/${var.run_id}/" }
    nebius = { annotations = {}, uri = "s3://burst-${var.run_id}-ckpt/runs/${var.run_id}/" }
    oci    = { annotations = {}, uri = "oci://burst-${var.run_id}-ckpt/runs/${var.run_id}/" }
  }
  emulated = lookup(local.identity, var.cloud_provider, local.identity["aws"])
}

################################################################################
# Network: the site-to-site VPN back to the control network
################################################################################

resource "terraform_data" "vpn" {
  input = {
    name   = "burst-${var.run_id}-vpn"
    region = var.region
    tags   = local.tags
  }
}

################################################################################
# Node group (created after the network; where the emulated failures happen)
################################################################################

resource "terraform_data" "node_group" {
  input = {
    name     = "burst-${var.run_id}"
    provider = var.cloud_provider
    region   = var.region
    capacity = var.capacity
    vpn      = terraform_data.vpn.output.name
    site     = var.site
    tags     = local.tags
  }

  lifecycle {
    # Both conditions read self.id, which is unknown until the object exists: they are
    # checked at apply time, after the VPN and the node group are in the state.
    postcondition {
      condition     = self.id == "" || !local.no_capacity
      error_message = "${local.capacity_error}: node group burst-${var.run_id} CREATE_FAILED: there is no ${var.capacity} capacity for ${var.gpu_type} in ${var.region} (${var.cloud_provider}, emulated by simulate_no_capacity)."
    }
    postcondition {
      condition     = self.id == "" || !var.fail_midway
      error_message = "Injected failure midway through provision of burst-${var.run_id} in ${var.region} (fail_midway): the VPN and node group exist, the nodes do not."
    }
  }
}

resource "terraform_data" "node" {
  count = var.node_count

  input = {
    name       = "burst-${var.run_id}-node-${count.index}"
    node_group = terraform_data.node_group.output.name
    region     = var.region
    labels     = local.node_labels
    tags       = local.tags
  }
}
