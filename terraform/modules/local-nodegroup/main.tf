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
  tags        = merge(var.tags, { "burst:run-id" = var.run_id })
  group_name  = "burst-${var.run_id}"
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

  # The run's shape: GPUs on each node and, with spot_with_floor, how many of the nodes are
  # on-demand. The variable wins, then the site's value (the cloud stacks take both, so a
  # site file may set them), then 8 GPUs and one floor node (the stacks refuse a
  # spot_with_floor without one).
  gpus  = coalesce(var.gpus_per_node, try(tonumber(jsondecode(var.site["gpus_per_node"])), null), 8)
  spot  = var.capacity != "on_demand"
  floor = var.capacity == "spot_with_floor" ? coalesce(var.on_demand_floor, try(tonumber(jsondecode(var.site["on_demand_floor"])), null), 1) : 0

  ##############################################################################
  # The nodes as the provider's stack makes them: the labels and taints a real node of
  # the run registers with (the engines tier, devtools/cluster/tier.py, joins these to a
  # real cluster), and the node_selector and tolerations its stack hands the pods.
  # tests/terraform/test_local_node_shapes.py compares both with the real Terraform.
  ##############################################################################
  gpu_taint = { key = "nvidia.com/gpu", value = "present", effect = "NoSchedule" }

  # aws (burst-run + aws-gpu-nodegroup; oci, which has no stack, stands in as aws): EKS
  # managed node groups, the main one spot unless on_demand and, with spot_with_floor, an
  # on-demand floor group (the last `floor` nodes). The group's labels and taints, and the
  # labels EKS and the AWS cloud provider add: eks.amazonaws.com/capacityType and
  # eks.amazonaws.com/nodegroup (EKS), topology.kubernetes.io/region (the cloud provider).
  # Not emulated, their values unknown here and nothing selects on them: the zone, the
  # instance type, eks.amazonaws.com/nodegroup-image and sourceLaunchTemplate*.
  managed = {
    for pool, on_demand in { main = !local.spot, floor = true } : pool => {
      labels = {
        "accelerator"                    = var.gpu_type
        "burst/run-id"                   = var.run_id
        "burst/capacity"                 = on_demand ? "on_demand" : "spot"
        "eks.amazonaws.com/capacityType" = on_demand ? "ON_DEMAND" : "SPOT"
        "eks.amazonaws.com/nodegroup"    = pool == "main" ? local.group_name : "${local.group_name}-od"
        "topology.kubernetes.io/region"  = var.region
      }
      taints = on_demand ? [local.gpu_taint] : [local.gpu_taint, { key = "spot", value = "true", effect = "NoSchedule" }]
    }
  }
  managed_selector = merge(
    { "accelerator" = var.gpu_type, "burst/run-id" = var.run_id },
    # not with a floor: the pods may land on either group
    local.spot && local.floor > 0 ? {} : { "burst/capacity" = local.spot ? "spot" : "on_demand" },
    { "topology.kubernetes.io/region" = var.region },
  )
  managed_tolerations = concat(
    [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }],
    local.spot ? [{ key = "spot", operator = "Equal", value = "true", effect = "NoSchedule" }] : [],
  )

  # gcp, azure, nebius: the VMs join the home cluster as EKS hybrid nodes (aws-hybrid-join),
  # every node alike whatever its pool: the stack's node_labels (accelerator, the candidate's
  # capacity, the region), the join's burst/run-id, nodeadm's eks.amazonaws.com/compute-type,
  # and the taints nvidia.com/gpu=present and the run's burst/run-id. No spot taint.
  hybrid = contains(["gcp", "azure", "nebius"], var.cloud_provider)
  hybrid_labels = {
    "accelerator"                    = var.gpu_type
    "burst/capacity"                 = var.capacity
    "topology.kubernetes.io/region"  = var.region
    "burst/run-id"                   = var.run_id
    "eks.amazonaws.com/compute-type" = "hybrid"
  }
  hybrid_taints = [local.gpu_taint, { key = "burst/run-id", value = var.run_id, effect = "NoSchedule" }]
  hybrid_tolerations = [
    for t in local.hybrid_taints : { key = t.key, operator = "Equal", value = t.value, effect = t.effect }
  ]

  # node i's pool: the floor is the last `floor` nodes
  node_shapes = [
    for i in range(var.node_count) : local.hybrid ? { labels = local.hybrid_labels, taints = local.hybrid_taints } : local.managed[i < var.node_count - local.floor ? "main" : "floor"]
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
    name     = local.group_name
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

  # What the engines tier reads (devtools/cluster/tier.py): the node's name, its labels, its
  # taints ({key, value, effect}, Kubernetes' effect names) and its GPUs (nvidia.com/gpu).
  input = {
    name       = "burst-${var.run_id}-node-${count.index}"
    node_group = terraform_data.node_group.output.name
    region     = var.region
    labels     = local.node_shapes[count.index].labels
    taints     = local.node_shapes[count.index].taints
    gpus       = local.gpus
    tags       = local.tags
  }
}
