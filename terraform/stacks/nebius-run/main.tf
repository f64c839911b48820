################################################################################
# nebius-run: the root module one run applies on Nebius AI Cloud, in one region (the
# plan's candidate): an mk8s node group of GPU VMs (preemptible or regular, optional
# regular floor) on a private subnet, an Object Storage bucket for checkpoints, and a
# service account for the train pods with edit rights on that bucket only. The VPN back
# to the control network is the site's (var.vpn). State: S3 backend on Nebius Object
# Storage, key from the run id. Checked by fmt, hclcheck and checkov only (no schema
# binding exists for this provider).
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

  node_labels = {
    "accelerator"    = var.accelerator
    "burst/run-id"   = var.run_id
    "burst/capacity" = var.capacity
  }
  gpu_taint  = { key = "nvidia.com/gpu", value = "present", effect = "NO_SCHEDULE" }
  spot_taint = { key = "spot", value = "true", effect = "NO_SCHEDULE" }
  template = {
    resources          = { platform = var.platform, preset = var.preset }
    boot_disk          = { type = "NETWORK_SSD", size_gibibytes = var.boot_disk_gb }
    network_interfaces = [{ subnet_id = var.subnet_id }]
    gpu_settings       = { drivers_preset = var.drivers_preset }
    gpu_cluster        = var.gpu_cluster_id == null ? null : { id = var.gpu_cluster_id }
  }
}

# Credentials come from the environment (a service account's authorized key file or
# NEBIUS_IAM_TOKEN), never from this configuration.
provider "nebius" {}

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

# Workload identity: the cluster's service-account token issuer (OIDC) may act as the run's
# service account, for the run's Kubernetes service account only (the token's "sub" claim),
# so no static key reaches the pods. The mk8s cluster does not export its issuer in the
# provider, so the site gives it (var.oidc_issuer_url). Provider docs:
# docs/resources/iam_v1_federated_credentials.md.
resource "nebius_iam_v1_federated_credentials" "pod" {
  parent_id            = var.project_id
  name                 = "${local.name}-pod"
  subject_id           = nebius_iam_v1_service_account.pod.id
  federated_subject_id = "system:serviceaccount:${var.namespace}:${local.service_account}"
  labels               = local.labels

  oidc_provider = {
    issuer_url = var.oidc_issuer_url
  }
}

resource "nebius_iam_v1_access_permit" "bucket" {
  parent_id   = nebius_iam_v1_group.pod.id
  resource_id = nebius_storage_v1_bucket.checkpoints.id
  role        = "storage.editor"
}

################################################################################
# GPU nodes: the main group (preemptible unless on_demand) and an optional regular floor
################################################################################

resource "nebius_mk8s_v1_node_group" "gpu" {
  parent_id        = var.cluster_id
  name             = local.name
  fixed_node_count = local.main_nodes
  labels           = local.labels

  template = merge(local.template, {
    metadata = { labels = local.node_labels }
    taints   = local.spot ? [local.gpu_taint, local.spot_taint] : [local.gpu_taint]
    # an empty object enables preemptible nodes; the block has no attributes
    # (provider docs: docs/resources/mk8s_v1_node_group.md, template.preemptible)
    preemptible = local.spot ? {} : null
  })
}

resource "nebius_mk8s_v1_node_group" "floor" {
  count            = local.floor > 0 ? 1 : 0
  parent_id        = var.cluster_id
  name             = "${local.name}-od"
  fixed_node_count = local.floor
  labels           = local.labels

  template = merge(local.template, {
    metadata    = { labels = merge(local.node_labels, { "burst/capacity" = "on_demand" }) }
    taints      = [local.gpu_taint]
    preemptible = null
  })
}
