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
    tags     = local.tags
  }

  lifecycle {
    # Both conditions read self.id, which is unknown until the object exists: they are
    # checked at apply time, after the VPN and the node group are in the state.
    postcondition {
      condition     = self.id == "" || !local.no_capacity
      error_message = "InsufficientInstanceCapacity: node group burst-${var.run_id} CREATE_FAILED: there is no ${var.capacity} capacity for ${var.gpu_type} in ${var.region} (emulated by simulate_no_capacity)."
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
