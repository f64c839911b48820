################################################################################
# local-nodegroup: the embedded default. It stands for an ephemeral GPU node group
# and its VPN with builtin terraform_data resources only, so `burst run` applies and
# destroys real Terraform state on a laptop or a CI machine with no cloud account.
################################################################################

locals {
  tags = merge(var.tags, { "burst:run-id" = var.run_id })
  node_labels = {
    "accelerator"     = var.gpu_type
    "burst/run-id"    = var.run_id
    "burst/capacity"  = var.capacity
    "topology/region" = var.region
  }
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
# Node group
################################################################################

resource "terraform_data" "node" {
  count = var.node_count

  input = {
    name     = "burst-${var.run_id}-node-${count.index}"
    provider = var.cloud_provider
    region   = var.region
    capacity = var.capacity
    labels   = local.node_labels
    vpn      = terraform_data.vpn.output.name
    tags     = local.tags
  }
}
