################################################################################
# aws-hybrid-join: what the home EKS cluster needs so that one run's rented nodes,
# outside AWS, join it as EKS Hybrid Nodes over the site-to-site VPN (docs/topology.md,
# decision A). Applied with a provider of the home cluster's region.
#
# Per run: the nodes' IAM role (assumed through an SSM hybrid activation), the activation
# (as many registrations as the run has nodes, expiring with the run), the role's access
# entry (type HYBRID_LINUX), and, when home_routing is given, the home VPC's routes and the
# cluster security group's rules for the run's remote node and pod networks.
# Checked, not changed: the cluster's remote network configuration must cover those
# networks, its authentication mode must allow access entries, and its endpoint must not
# be "public and private" (Amazon EKS User Guide, hybrid nodes; docs/topology.md).
################################################################################

data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}
data "aws_region" "current" {}

data "aws_eks_cluster" "home" {
  name = var.cluster_name

  lifecycle {
    postcondition {
      condition     = contains(["API", "API_AND_CONFIG_MAP"], try(self.access_config[0].authentication_mode, ""))
      error_message = "cluster ${var.cluster_name}: hybrid nodes join through an access entry; the cluster's authentication mode must be API or API_AND_CONFIG_MAP."
    }
    postcondition {
      condition     = !(try(self.vpc_config[0].endpoint_public_access, false) && try(self.vpc_config[0].endpoint_private_access, false))
      error_message = "cluster ${var.cluster_name}: hybrid nodes need the endpoint to be public or private, not both (the endpoint would resolve to private addresses the remote nodes cannot reach)."
    }
    postcondition {
      condition = alltrue([
        for want in var.remote_node_cidrs : anytrue([
          for have in flatten([for n in try(self.remote_network_config[0].remote_node_networks, []) : n.cidrs]) :
          tonumber(split("/", want)[1]) >= tonumber(split("/", have)[1]) &&
          cidrhost("${split("/", want)[0]}/${split("/", have)[1]}", 0) == cidrhost(have, 0)
        ])
      ])
      error_message = "cluster ${var.cluster_name}: its remote node networks do not cover ${join(", ", var.remote_node_cidrs)}; add them to the cluster's remote network configuration first (a cluster-level setting this run does not own)."
    }
    postcondition {
      condition = alltrue([
        for want in var.remote_pod_cidrs : anytrue([
          for have in flatten([for n in try(self.remote_network_config[0].remote_pod_networks, []) : n.cidrs]) :
          tonumber(split("/", want)[1]) >= tonumber(split("/", have)[1]) &&
          cidrhost("${split("/", want)[0]}/${split("/", have)[1]}", 0) == cidrhost(have, 0)
        ])
      ])
      error_message = "cluster ${var.cluster_name}: its remote pod networks do not cover ${join(", ", var.remote_pod_cidrs)}; add them to the cluster's remote network configuration first."
    }
  }
}

locals {
  tags        = merge(var.tags, { "burst:run-id" = var.run_id })
  policy_arn  = "arn:${data.aws_partition.current.partition}:iam::aws:policy"
  cluster_arn = data.aws_eks_cluster.home.arn
  labels      = merge(var.node_labels, { "burst/run-id" = var.run_id })
  taints      = concat(["nvidia.com/gpu=present:NoSchedule"], var.node_taints)
  remote      = concat(var.remote_node_cidrs, var.remote_pod_cidrs)
  k8s_version = coalesce(var.kubernetes_version, data.aws_eks_cluster.home.version)
  routes = var.home_routing == null ? {} : {
    for pair in setproduct(var.home_routing.route_table_ids, local.remote) :
    "${pair[0]}|${pair[1]}" => { route_table_id = pair[0], cidr = pair[1] }
  }
}

# What a rented node bootstraps with: nodeadm NodeConfig for an SSM hybrid activation
# (Amazon EKS User Guide, "Hybrid nodes nodeadm reference": spec.cluster, spec.hybrid.ssm,
# spec.kubelet.flags). Carries the activation code: every output of it is sensitive.
locals {
  nodeadm_config = yamlencode({
    apiVersion = "node.eks.aws/v1alpha1"
    kind       = "NodeConfig"
    spec = {
      cluster = { name = var.cluster_name, region = data.aws_region.current.region }
      hybrid = {
        ssm = {
          activationId   = aws_ssm_activation.nodes.id
          activationCode = aws_ssm_activation.nodes.activation_code
        }
      }
      kubelet = {
        flags = [
          "--node-labels=${join(",", [for k, v in local.labels : "${k}=${v}"])}",
          "--register-with-taints=${join(",", local.taints)}",
        ]
      }
    }
  })
}

################################################################################
# The nodes' role: assumed by SSM for the activation's managed instances
################################################################################

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ssm.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = ["arn:${data.aws_partition.current.partition}:ssm:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:*"]
    }
  }
}

data "aws_iam_policy_document" "node" {
  statement {
    sid       = "DescribeHomeCluster"
    actions   = ["eks:DescribeCluster"]
    resources = [local.cluster_arn]
  }

  statement {
    sid       = "DeregisterOwnInstances"
    actions   = ["ssm:DeregisterManagedInstance"]
    resources = ["arn:${data.aws_partition.current.partition}:ssm:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:managed-instance/*"]
    condition {
      test     = "StringEquals"
      variable = "ssm:resourceTag/EKSClusterARN"
      values   = [local.cluster_arn]
    }
  }

  statement {
    sid       = "DescribeInstanceInformation"
    actions   = ["ssm:DescribeInstanceInformation"]
    resources = ["*"]
  }
}

resource "aws_iam_role" "node" {
  name_prefix          = "burst-hybrid-"
  description          = "burst run ${var.run_id}: rented nodes joining ${var.cluster_name} as EKS hybrid nodes"
  assume_role_policy   = data.aws_iam_policy_document.assume.json
  permissions_boundary = var.permissions_boundary_arn
  max_session_duration = 3600
  tags                 = local.tags
}

resource "aws_iam_role_policy" "node" {
  name   = "hybrid-node-of-run"
  role   = aws_iam_role.node.id
  policy = data.aws_iam_policy_document.node.json
}

resource "aws_iam_role_policy_attachment" "node" {
  for_each   = toset(["AmazonSSMManagedInstanceCore", "AmazonEC2ContainerRegistryPullOnly"])
  role       = aws_iam_role.node.name
  policy_arn = "${local.policy_arn}/${each.value}"
}

################################################################################
# The activation the nodes register with (nodeadm's hybrid.ssm), and their access entry
################################################################################

resource "aws_ssm_activation" "nodes" {
  name        = "burst-${var.run_id}"
  description = "burst run ${var.run_id}: hybrid nodes of ${var.cluster_name}"
  iam_role    = aws_iam_role.node.id
  # Every VM that boots with the user data registers anew: a preempted node that its scale
  # set or instance group recreates is a new managed instance, and SSM refuses registrations
  # past the limit (the replacement would never join while it bills). A budget of
  # registrations per node, capped at SSM's 1000.
  registration_limit = min(1000, var.node_count * var.registrations_per_node)
  expiration_date    = var.expires_at
  # the role's DeregisterManagedInstance condition reads this tag
  tags = merge(local.tags, { EKSClusterARN = local.cluster_arn })

  depends_on = [aws_iam_role_policy_attachment.node]
}

resource "aws_eks_access_entry" "nodes" {
  cluster_name  = var.cluster_name
  principal_arn = aws_iam_role.node.arn
  type          = "HYBRID_LINUX"
  tags          = local.tags
}

################################################################################
# The home side of the VPN: routes to the remote networks, the control plane's rules
################################################################################

resource "aws_route" "remote_via_tgw" {
  for_each               = try(var.home_routing.transit_gateway_id, null) != null ? local.routes : {}
  route_table_id         = each.value.route_table_id
  destination_cidr_block = each.value.cidr
  transit_gateway_id     = var.home_routing.transit_gateway_id
}

resource "aws_route" "remote_via_vgw" {
  for_each               = try(var.home_routing.transit_gateway_id, null) == null ? local.routes : {}
  route_table_id         = each.value.route_table_id
  destination_cidr_block = each.value.cidr
  gateway_id             = var.home_routing.vpn_gateway_id
}

resource "aws_vpc_security_group_ingress_rule" "remote_to_api" {
  for_each          = var.home_routing == null ? toset([]) : toset(local.remote)
  security_group_id = data.aws_eks_cluster.home.vpc_config[0].cluster_security_group_id
  description       = "burst run ${var.run_id}: hybrid nodes and their webhook pods to the API server"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value
  tags              = local.tags
}
