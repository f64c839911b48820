################################################################################
# aws-gpu-nodegroup: an ephemeral EKS managed node group of GPU instances for one
# run. Spot or on-demand across several instance types, an optional on-demand floor,
# labels and taints for the train step, IMDSv2 required, encrypted volumes.
################################################################################

locals {
  tags = merge(var.tags, { "burst:run-id" = var.run_id })
  labels = merge(var.labels, {
    "accelerator"  = var.accelerator
    "burst/run-id" = var.run_id
  })
  extra_security_group_ids = var.cluster_security_group_id == null ? [] : [var.cluster_security_group_id]
}

################################################################################
# Security group: nodes talk to each other (NCCL) and to the control network only
################################################################################

resource "aws_security_group" "nodes" {
  name_prefix = "burst-${var.run_id}-nodes-"
  description = "burst run ${var.run_id}: GPU nodes"
  vpc_id      = var.vpc_id
  tags        = local.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "self" {
  security_group_id            = aws_security_group.nodes.id
  description                  = "Node to node (collectives, rendezvous)"
  ip_protocol                  = "-1"
  referenced_security_group_id = aws_security_group.nodes.id
  tags                         = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "control" {
  for_each          = toset(var.control_network_cidrs)
  security_group_id = aws_security_group.nodes.id
  description       = "Control network over the site-to-site VPN"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "https" {
  security_group_id = aws_security_group.nodes.id
  description       = "HTTPS to AWS APIs, the cluster endpoint and the registry"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
  tags              = local.tags
}

# DNS: the pods resolve through CoreDNS, whose pods run on other nodes of the cluster (not
# in this group): a security group managed by Terraform has no default egress, so without
# these every lookup from the train pod times out. (The VPC resolver at VPC+2 and Amazon
# Time Sync at 169.254.169.123 are never filtered by security groups.)
resource "aws_vpc_security_group_egress_rule" "dns" {
  for_each          = toset(["udp", "tcp"])
  security_group_id = aws_security_group.nodes.id
  description       = "DNS (${each.value}) to CoreDNS"
  ip_protocol       = each.value
  from_port         = 53
  to_port           = 53
  cidr_ipv4         = "0.0.0.0/0"
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "self" {
  security_group_id            = aws_security_group.nodes.id
  description                  = "Node to node (collectives, rendezvous)"
  ip_protocol                  = "-1"
  referenced_security_group_id = aws_security_group.nodes.id
  tags                         = local.tags
}

################################################################################
# Launch template: IMDSv2 only, encrypted root volume, tags on everything launched
################################################################################

resource "aws_launch_template" "nodes" {
  name_prefix            = "burst-${var.run_id}-"
  description            = "burst run ${var.run_id}: GPU nodes"
  update_default_version = true
  vpc_security_group_ids = concat([aws_security_group.nodes.id], local.extra_security_group_ids)

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "disabled"
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = var.disk_size_gb
      volume_type           = "gp3"
      encrypted             = true
      kms_key_id            = var.ebs_kms_key_arn
      delete_on_termination = true
    }
  }

  monitoring {
    enabled = true
  }

  tag_specifications {
    resource_type = "instance"
    tags          = local.tags
  }

  tag_specifications {
    resource_type = "volume"
    tags          = local.tags
  }

  tag_specifications {
    resource_type = "network-interface"
    tags          = local.tags
  }

  tag_specifications {
    resource_type = "spot-instances-request"
    tags          = local.tags
  }

  tags = local.tags
}

################################################################################
# Node groups: the main one (spot by default) and an optional on-demand floor
################################################################################

resource "aws_eks_node_group" "main" {
  cluster_name           = var.cluster_name
  node_group_name_prefix = "burst-${var.run_id}-"
  node_role_arn          = var.node_role_arn
  subnet_ids             = var.subnet_ids
  capacity_type          = var.capacity_type
  instance_types         = var.instance_types
  ami_type               = var.ami_type
  labels                 = merge(local.labels, { "burst/capacity" = lower(var.capacity_type) })
  tags                   = local.tags

  launch_template {
    id      = aws_launch_template.nodes.id
    version = aws_launch_template.nodes.latest_version
  }

  scaling_config {
    desired_size = var.desired_size
    min_size     = var.min_size
    max_size     = var.max_size
  }

  update_config {
    max_unavailable = 1
  }

  taint {
    key    = "nvidia.com/gpu"
    value  = "present"
    effect = "NO_SCHEDULE"
  }

  dynamic "taint" {
    for_each = var.capacity_type == "SPOT" ? [1] : []
    content {
      key    = "spot"
      value  = "true"
      effect = "NO_SCHEDULE"
    }
  }

  lifecycle {
    create_before_destroy = true
    ignore_changes        = [scaling_config[0].desired_size]
  }
}

resource "aws_eks_node_group" "on_demand_floor" {
  count                  = var.on_demand_floor > 0 && var.capacity_type == "SPOT" ? 1 : 0
  cluster_name           = var.cluster_name
  node_group_name_prefix = "burst-${var.run_id}-od-"
  node_role_arn          = var.node_role_arn
  subnet_ids             = var.subnet_ids
  capacity_type          = "ON_DEMAND"
  instance_types         = var.instance_types
  ami_type               = var.ami_type
  labels                 = merge(local.labels, { "burst/capacity" = "on_demand" })
  tags                   = local.tags

  launch_template {
    id      = aws_launch_template.nodes.id
    version = aws_launch_template.nodes.latest_version
  }

  scaling_config {
    desired_size = var.on_demand_floor
    min_size     = var.on_demand_floor
    max_size     = var.on_demand_floor
  }

  update_config {
    max_unavailable = 1
  }

  taint {
    key    = "nvidia.com/gpu"
    value  = "present"
    effect = "NO_SCHEDULE"
  }
}
