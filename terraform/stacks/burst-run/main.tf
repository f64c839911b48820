################################################################################
# burst-run: the root module one run applies, in one region (the plan's candidate).
# State: S3 with a lock file, key derived from the run id (see versions.tf).
################################################################################

locals {
  tags = merge(var.extra_tags, {
    "burst:run-id"      = var.run_id
    "burst:expires-at"  = var.expires_at
    "burst:owner"       = var.owner
    "burst:team"        = var.team
    "burst:cost-centre" = var.cost_centre
  })
  spot = var.capacity != "on_demand"
  # spot_with_floor: on_demand_floor of the node_count nodes are on-demand, the rest spot
  floor      = var.capacity == "spot_with_floor" ? var.on_demand_floor : 0
  spot_nodes = var.node_count - local.floor
}

provider "aws" {
  region = var.region

  default_tags {
    tags = local.tags
  }
}

################################################################################
# Checkpoints and identity
################################################################################

module "checkpoints" {
  source            = "../../modules/aws-checkpoint-bucket"
  run_id            = var.run_id
  force_destroy     = true
  replication       = var.checkpoint_replication
  access_log_bucket = var.access_log_bucket
  tags              = local.tags
}

data "aws_partition" "current" {}

module "iam" {
  source            = "../../modules/aws-run-iam"
  run_id            = var.run_id
  oidc_provider_arn = var.oidc_provider_arn
  oidc_provider_url = var.oidc_provider_url
  bucket_arn        = module.checkpoints.bucket_arn
  checkpoint_prefix = module.checkpoints.checkpoint_prefix
  kms_key_arn       = module.checkpoints.kms_key_arn
  state_bucket_arn  = var.state_bucket == null ? null : "arn:${data.aws_partition.current.partition}:s3:::${var.state_bucket}"
  # the run's own store (the spec's, under the run id): s3://<bucket>/<prefix>
  run_store_bucket_arn = var.run_store_uri == null ? null : "arn:${data.aws_partition.current.partition}:s3:::${regex("^s3://([^/]+)/", var.run_store_uri)[0]}"
  run_store_prefix     = var.run_store_uri == null ? null : "${trimsuffix(regex("^s3://[^/]+/(.+)$", var.run_store_uri)[0], "/")}/"
  # a regional-sync run's exchange store: s3://<bucket>/<prefix>/
  exchange_bucket_arn = var.exchange_uri == null ? null : "arn:${data.aws_partition.current.partition}:s3:::${regex("^s3://([^/]+)/", var.exchange_uri)[0]}"
  exchange_prefix     = var.exchange_uri == null ? null : "${trimsuffix(regex("^s3://[^/]+/(.+)$", var.exchange_uri)[0], "/")}/"
  store_kms_key_arn   = var.store_kms_key_arn
  # only a placement that can probe (burst.train.spot_probe: an on-demand fallback)
  spot_probe = var.spot_probe && var.capacity == "on_demand"
  tags       = local.tags
}

################################################################################
# Network back home
################################################################################

module "vpn" {
  source                   = "../../modules/aws-site-vpn"
  run_id                   = var.run_id
  vpc_id                   = var.vpc_id
  route_table_ids          = var.route_table_ids
  transit_gateway_id       = var.vpn.transit_gateway_id
  customer_gateway_ip      = var.vpn.customer_gateway_ip
  customer_gateway_bgp_asn = var.vpn.bgp_asn
  control_network_cidrs    = var.vpn.control_network_cidrs
  static_routes_only       = var.vpn.static_routes_only
  tags                     = local.tags
}

################################################################################
# GPU nodes
################################################################################

# EC2 nodes other than hybrid nodes must be in the cluster's VPC (Amazon EKS User Guide,
# "Manage compute resources by using nodes"), and EKS Hybrid Nodes are not supported on
# EC2: an AWS region joins the home cluster only through that cluster's own VPC
# (docs/topology.md, "AWS regions as sites").
data "aws_eks_cluster" "home" {
  name = var.cluster_name

  lifecycle {
    postcondition {
      condition     = self.vpc_config[0].vpc_id == var.vpc_id
      error_message = "site ${var.region}: vpc_id ${var.vpc_id} is not the VPC of cluster ${var.cluster_name}; EC2 GPU nodes join an EKS cluster only in its own VPC (docs/topology.md)."
    }
  }
}

module "nodegroup" {
  source                    = "../../modules/aws-gpu-nodegroup"
  run_id                    = var.run_id
  cluster_name              = data.aws_eks_cluster.home.name
  cluster_security_group_id = var.cluster_security_group_id
  vpc_id                    = var.vpc_id
  subnet_ids                = var.subnet_ids
  node_role_arn             = module.iam.node_role_arn
  instance_types            = var.instance_types
  capacity_type             = local.spot ? "SPOT" : "ON_DEMAND"
  on_demand_floor           = local.floor
  desired_size              = local.spot_nodes
  min_size                  = 0
  max_size                  = local.spot_nodes
  accelerator               = var.accelerator
  ami_type                  = var.ami_type
  ebs_kms_key_arn           = module.checkpoints.kms_key_arn
  control_network_cidrs     = var.vpn.control_network_cidrs
  tags                      = local.tags

  depends_on = [module.vpn]
}
