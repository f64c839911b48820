################################################################################
# nebius-run: the root module one run applies on Nebius AI Cloud, in one region (the
# plan's candidate). The run's GPU VMs (compute instances, preemptible or regular,
# optional regular floor) on a private subnet join the HOME EKS cluster as EKS Hybrid
# Nodes over the site's VPN (docs/topology.md, decision A): module "home"
# (terraform/modules/aws-hybrid-join) makes the home side and the VMs' cloud-init. Also:
# an Object Storage bucket for checkpoints, a service account for the train pods
# (federated with the home cluster's token issuer) with edit rights on that bucket only,
# and the nodes' security group. The VPN back to the control network is the site's
# (var.vpn). State: S3 backend on Nebius Object Storage, key from the run id. Checked by
# fmt, hclcheck, checkov and by hand against the provider's docs (no schema binding).
################################################################################

locals {
  tags = merge(var.extra_tags, {
    "burst:run-id"      = var.run_id
    "burst:expires-at"  = var.expires_at
    "burst:owner"       = var.owner
    "burst:team"        = var.team
    "burst:cost-centre" = var.cost_centre
  })
  # Nebius labels follow Kubernetes label syntax: burst:* tags become burst-* labels
  labels = {
    for k, v in local.tags :
    substr(lower(replace(k, "/[^0-9A-Za-z_.-]/", "-")), 0, 63) => substr(replace(v, "/[^0-9A-Za-z_.-]/", "_"), 0, 63)
  }

  short           = substr(sha1(var.run_id), 0, 12)
  name            = "burst-${local.short}"
  spot            = var.capacity != "on_demand"
  floor           = var.capacity == "spot_with_floor" ? var.on_demand_floor : 0
  main_nodes      = var.node_count - local.floor
  service_account = "burst-${var.run_id}"
  prefix          = "runs/${var.run_id}/"

  # every node of the run carries these labels and the run's taint (nvidia.com/gpu and
  # burst/run-id are added by the home module), so only this run's train pods land there.
  # The region too: a hybrid node has no cloud provider to label it, and without it the
  # Kueue flavors of one GPU and capacity on two sites cannot be told apart
  # (docs/reference/walk-kueue.md S9); NodeRestriction lets a kubelet set it on itself.
  node_labels = {
    "accelerator"                   = var.accelerator
    "burst/capacity"                = var.capacity
    "topology.kubernetes.io/region" = var.region
  }
  run_taint = "burst/run-id=${var.run_id}:NoSchedule"
  # one instance per node: name => preemptible
  nodes = merge(
    { for i in range(local.main_nodes) : "${local.name}-${i}" => local.spot },
    { for i in range(local.floor) : "${local.name}-od-${i}" => false },
  )
}

# Credentials come from the environment (a service account's authorized key file or
# NEBIUS_IAM_TOKEN), never from this configuration.
provider "nebius" {}

# The home cluster's account and region (aws-hybrid-join is applied there)
provider "aws" {
  alias  = "home"
  region = var.home.region

  default_tags {
    tags = local.tags
  }
}

################################################################################
# The home side: the nodes' role, SSM activation, access entry, their cloud-init
################################################################################

module "home" {
  source                   = "../../modules/aws-hybrid-join"
  providers                = { aws = aws.home }
  run_id                   = var.run_id
  cluster_name             = var.home.cluster_name
  expires_at               = var.expires_at
  node_count               = var.node_count
  remote_node_cidrs        = var.node_cidrs
  remote_pod_cidrs         = var.pod_cidrs
  home_routing             = var.home.routing
  kubernetes_version       = var.home.kubernetes_version
  permissions_boundary_arn = var.home.permissions_boundary_arn
  node_labels              = local.node_labels
  node_taints              = [local.run_taint]
  tags                     = local.tags
}

################################################################################
# Checkpoints: a bucket of the run, versioned, old versions expire
################################################################################

resource "nebius_storage_v1_bucket" "checkpoints" {
  parent_id         = var.project_id
  name              = "${local.name}-ckpt"
  versioning_policy = "ENABLED"
  labels            = local.labels

  lifecycle_configuration = {
    rules = [{
      id     = "expire-old-versions"
      status = "ENABLED"
      filter = { prefix = local.prefix }
      noncurrent_version_expiration = {
        noncurrent_days = 7
      }
    }]
  }
}

################################################################################
# Identity of the train pods: a service account that may edit this run's bucket only
################################################################################

resource "nebius_iam_v1_service_account" "pod" {
  parent_id = var.project_id
  name      = "${local.name}-pod"
}

resource "nebius_iam_v1_group" "pod" {
  parent_id = var.project_id
  name      = "${local.name}-pod"
}

resource "nebius_iam_v1_group_membership" "pod" {
  parent_id = nebius_iam_v1_group.pod.id
  member_id = nebius_iam_v1_service_account.pod.id
}

# Workload identity: the home cluster's service-account token issuer (OIDC) may act as the
# run's service account, for the run's Kubernetes service account only (the token's "sub"
# claim), so no static key reaches the pods. Provider docs:
# docs/resources/iam_v1_federated_credentials.md.
resource "nebius_iam_v1_federated_credentials" "pod" {
  parent_id            = var.project_id
  name                 = "${local.name}-pod"
  subject_id           = nebius_iam_v1_service_account.pod.id
  federated_subject_id = "system:serviceaccount:${var.namespace}:${local.service_account}"
  labels               = local.labels

  oidc_provider = {
    issuer_url = module.home.oidc_issuer_url
  }
}

resource "nebius_iam_v1_access_permit" "bucket" {
  parent_id   = nebius_iam_v1_group.pod.id
  resource_id = nebius_storage_v1_bucket.checkpoints.id
  role        = "storage.editor"
}

################################################################################
# The nodes' security group (docs/topology.md: inbound 10250 from the control plane's
# network, outbound 443 and 10250 to it; the run's nodes talk to each other; outbound
# HTTPS for nodeadm and the AWS endpoints). Provider docs: docs/resources/
# vpc_v1_security_group.md, vpc_v1_security_rule.md (first match by priority).
################################################################################

resource "nebius_vpc_v1_security_group" "nodes" {
  parent_id  = var.project_id
  network_id = var.network_id
  name       = "${local.name}-nodes"
  labels     = local.labels
}

resource "nebius_vpc_v1_security_rule" "kubelet_from_home" {
  parent_id = nebius_vpc_v1_security_group.nodes.id
  name      = "kubelet-from-home"
  access    = "ALLOW"
  protocol  = "TCP"
  priority  = 100
  labels    = local.labels

  ingress = {
    source_cidrs      = var.vpn.control_network_cidrs
    destination_ports = [10250]
  }
}

resource "nebius_vpc_v1_security_rule" "within_run" {
  parent_id = nebius_vpc_v1_security_group.nodes.id
  name      = "within-run"
  access    = "ALLOW"
  protocol  = "ANY"
  priority  = 110
  labels    = local.labels

  ingress = {
    source_security_group_id = nebius_vpc_v1_security_group.nodes.id
  }
}

resource "nebius_vpc_v1_security_rule" "to_home" {
  parent_id = nebius_vpc_v1_security_group.nodes.id
  name      = "to-home"
  access    = "ALLOW"
  protocol  = "TCP"
  priority  = 100
  labels    = local.labels

  egress = {
    destination_cidrs = var.vpn.control_network_cidrs
    destination_ports = [443, 10250]
  }
}

resource "nebius_vpc_v1_security_rule" "within_run_out" {
  parent_id = nebius_vpc_v1_security_group.nodes.id
  name      = "within-run-out"
  access    = "ALLOW"
  protocol  = "ANY"
  priority  = 110
  labels    = local.labels

  egress = {
    destination_security_group_id = nebius_vpc_v1_security_group.nodes.id
  }
}

# What a node needs besides HTTPS before and while it joins: DNS (its resolver, and the home
# cluster's CoreDNS over the VPN), time (NTP: a clock that drifts breaks TLS and SigV4
# signatures) and the distribution's package mirrors (`nodeadm install` installs containerd
# from them, over HTTP on Ubuntu). The group denies what no rule allows.
resource "nebius_vpc_v1_security_rule" "dns_ntp_out" {
  parent_id = nebius_vpc_v1_security_group.nodes.id
  name      = "dns-ntp-out"
  access    = "ALLOW"
  protocol  = "UDP"
  priority  = 120
  labels    = local.labels

  egress = {
    destination_ports = [53, 123]
  }
}

resource "nebius_vpc_v1_security_rule" "dns_mirrors_out" {
  parent_id = nebius_vpc_v1_security_group.nodes.id
  name      = "dns-mirrors-out"
  access    = "ALLOW"
  protocol  = "TCP"
  priority  = 120
  labels    = local.labels

  egress = {
    destination_ports = [53, 80]
  }
}

resource "nebius_vpc_v1_security_rule" "https_out" {
  parent_id = nebius_vpc_v1_security_group.nodes.id
  name      = "https-out"
  access    = "ALLOW"
  protocol  = "TCP"
  priority  = 120
  labels    = local.labels

  egress = {
    destination_ports = [443]
  }
}

################################################################################
# GPU nodes: one instance per node, preemptible (stopped on preemption: the node goes
# NotReady and its pod is requeued, docs/topology.md) unless on_demand or the floor
################################################################################

resource "nebius_compute_v1_instance" "gpu" {
  for_each             = local.nodes
  parent_id            = var.project_id
  name                 = each.key
  labels               = local.labels
  cloud_init_user_data = module.home.user_data
  recovery_policy      = each.value ? "FAIL" : "RECOVER"
  gpu_cluster          = var.gpu_cluster_id == null ? null : { id = var.gpu_cluster_id }
  # include to create a preemptible VM, omit for a regular one
  # (provider docs: docs/resources/compute_v1_instance.md, preemptible.on_preemption)
  preemptible = each.value ? { on_preemption = "STOP" } : null

  resources = {
    platform = var.platform
    preset   = var.preset
  }

  boot_disk = {
    attach_mode = "READ_WRITE"
    managed_disk = {
      name   = "${each.key}-boot"
      labels = local.labels
      spec = {
        type                = var.boot_disk_type
        size_gibibytes      = var.boot_disk_gb
        source_image_family = { image_family = var.image_family }
        # the platform's managed key: offered on these two disk types only (provider docs,
        # boot_disk.managed_disk.spec.disk_encryption)
        disk_encryption = contains(["NETWORK_SSD_NON_REPLICATED", "NETWORK_SSD_IO_M3"], var.boot_disk_type) ? { type = "DISK_ENCRYPTION_MANAGED" } : null
      }
    }
  }

  # no public_ip_address: the node has a private address only
  network_interfaces = [{
    name            = "eth0"
    subnet_id       = var.subnet_id
    ip_address      = {}
    security_groups = [{ id = nebius_vpc_v1_security_group.nodes.id }]
  }]

  depends_on = [
    nebius_vpc_v1_security_rule.kubelet_from_home,
    nebius_vpc_v1_security_rule.to_home,
    nebius_vpc_v1_security_rule.https_out,
  ]
}
