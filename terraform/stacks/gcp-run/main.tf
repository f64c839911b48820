################################################################################
# gcp-run: the root module one run applies in GCP, in one region (the plan's candidate).
# The run's GPU VMs (managed instance groups of spot or on-demand machines, optional
# on-demand floor) join the HOME EKS cluster as EKS Hybrid Nodes over the run's HA VPN
# (docs/topology.md, decision A): module "home" (terraform/modules/aws-hybrid-join) makes
# the home side (role, SSM activation, access entry) and the cloud-init the VMs boot with.
# Also: a GCS bucket for checkpoints with a customer-managed key, a Google service account
# for the train pods, reached through workload identity federation with the home cluster's
# token issuer and allowed on the run's prefix only, and the nodes' firewall rules.
# State: GCS, prefix derived from the run id (see versions.tf).
################################################################################

locals {
  # GCP labels: lowercase letters, digits, '_' and '-' only, so the burst:* tags are
  # carried as burst-* labels with normalised values.
  tags = merge(var.extra_tags, {
    "burst:run-id"      = var.run_id
    "burst:expires-at"  = var.expires_at
    "burst:owner"       = var.owner
    "burst:team"        = var.team
    "burst:cost-centre" = var.cost_centre
  })
  labels = {
    for k, v in local.tags :
    substr(lower(replace(k, "/[^0-9A-Za-z_-]/", "-")), 0, 63) => substr(lower(replace(v, "/[^0-9A-Za-z_-]/", "_")), 0, 63)
  }

  short           = substr(sha1(var.run_id), 0, 12)
  name            = "burst-${local.short}"
  spot            = var.capacity != "on_demand"
  floor           = var.capacity == "spot_with_floor" ? var.on_demand_floor : 0
  main_nodes      = var.node_count - local.floor
  zone            = var.zones[0]
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
  pools = { for k, v in {
    main  = { size = local.main_nodes, spot = local.spot }
    floor = { size = local.floor, spot = false }
  } : k => v if v.size > 0 }
  # accelerator-optimized machine types (a2, a3, a4, g2) come with their GPUs attached;
  # other machine types (n1) take them as guest accelerators
  attached_gpus = can(regex("^(a2|a3|a4|g2)-", var.machine_type))
  subject       = "system:serviceaccount:${var.namespace}:${local.service_account}"
}

provider "google" {
  project        = var.project_id
  region         = var.region
  default_labels = local.labels
}

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
# Checkpoints: a bucket of the run, customer-managed key, no public access
################################################################################

resource "google_storage_bucket" "checkpoints" {
  #checkov:skip=CKV_GCP_62:access logs go to the project's Cloud Audit Logs (data access), no log bucket per run
  name                        = "${var.project_id}-${local.name}-ckpt"
  project                     = var.project_id
  location                    = upper(coalesce(var.bucket_location, var.region))
  force_destroy               = true
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = local.labels

  versioning {
    enabled = true
  }

  encryption {
    default_kms_key_name = var.kms_key_id
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 7
    }
    action {
      type = "Delete"
    }
  }
}

################################################################################
# Identity of the train pods: the home cluster's tokens, federated; the run's prefix only
################################################################################

resource "google_service_account" "pod" {
  project      = var.project_id
  account_id   = local.name
  display_name = "burst run ${var.run_id}: train pods"
  description  = "Train pods of burst run ${var.run_id} (home cluster, federated); read-write on its checkpoint prefix only."
}

# The train pods run in the home EKS cluster: their projected service-account tokens (issuer:
# the home cluster's OIDC issuer) are exchanged through a workload identity pool of the run,
# whose provider admits only the run's Kubernetes service account (Google Cloud IAM,
# "Workload Identity Federation with Kubernetes").
resource "google_iam_workload_identity_pool" "home" {
  project                   = var.project_id
  workload_identity_pool_id = local.name
  display_name              = local.name
  description               = "burst run ${var.run_id}: the home cluster's train pods"
}

resource "google_iam_workload_identity_pool_provider" "home" {
  project                            = var.project_id
  workload_identity_pool_id          = google_iam_workload_identity_pool.home.workload_identity_pool_id
  workload_identity_pool_provider_id = "home-cluster"
  display_name                       = "home cluster"
  attribute_mapping                  = { "google.subject" = "assertion.sub" }
  attribute_condition                = "assertion.sub == '${local.subject}'"

  oidc {
    issuer_uri = module.home.oidc_issuer_url
  }
}

resource "google_service_account_iam_member" "workload_identity" {
  service_account_id = google_service_account.pod.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "principal://iam.googleapis.com/${google_iam_workload_identity_pool.home.name}/subject/${local.subject}"
}

resource "google_storage_bucket_iam_member" "run_prefix" {
  bucket = google_storage_bucket.checkpoints.name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.pod.email}"

  condition {
    title       = "burst-run-prefix"
    description = "Objects under the run's prefix only."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.checkpoints.name}/objects/${local.prefix}\")"
  }
}

resource "google_storage_bucket_iam_member" "list" {
  # listing is authorised on the bucket, which holds this run's objects only
  bucket = google_storage_bucket.checkpoints.name
  role   = "roles/storage.legacyBucketReader"
  member = "serviceAccount:${google_service_account.pod.email}"
}

################################################################################
# Network back home: HA VPN to the control network's gateway, BGP over two tunnels
################################################################################

resource "google_compute_ha_vpn_gateway" "run" {
  name    = "${local.name}-vpn"
  project = var.project_id
  region  = var.region
  network = var.network
}

resource "google_compute_external_vpn_gateway" "control" {
  name            = "${local.name}-control"
  project         = var.project_id
  redundancy_type = length(var.vpn.peer_ip_addresses) == 2 ? "TWO_IPS_REDUNDANCY" : "SINGLE_IP_INTERNALLY_REDUNDANT"
  description     = "The control network's VPN gateway (burst run ${var.run_id})."
  labels          = local.labels

  dynamic "interface" {
    for_each = var.vpn.peer_ip_addresses
    content {
      id         = interface.key
      ip_address = interface.value
    }
  }
}

resource "google_compute_router" "vpn" {
  name    = "${local.name}-router"
  project = var.project_id
  region  = var.region
  network = var.network

  bgp {
    asn = var.vpn.router_bgp_asn
  }
}

resource "google_compute_vpn_tunnel" "tunnel" {
  count                           = 2
  name                            = "${local.name}-tunnel-${count.index}"
  project                         = var.project_id
  region                          = var.region
  vpn_gateway                     = google_compute_ha_vpn_gateway.run.id
  vpn_gateway_interface           = count.index
  peer_external_gateway           = google_compute_external_vpn_gateway.control.id
  peer_external_gateway_interface = min(count.index, length(var.vpn.peer_ip_addresses) - 1)
  shared_secret                   = var.vpn_shared_secret
  router                          = google_compute_router.vpn.id
  ike_version                     = 2
  labels                          = local.labels
}

resource "google_compute_router_interface" "tunnel" {
  count      = 2
  name       = "${local.name}-if-${count.index}"
  project    = var.project_id
  region     = var.region
  router     = google_compute_router.vpn.name
  ip_range   = "${cidrhost(var.vpn.tunnel_cidrs[count.index], 1)}/30"
  vpn_tunnel = google_compute_vpn_tunnel.tunnel[count.index].name
}

resource "google_compute_router_peer" "tunnel" {
  count           = 2
  name            = "${local.name}-peer-${count.index}"
  project         = var.project_id
  region          = var.region
  router          = google_compute_router.vpn.name
  peer_ip_address = cidrhost(var.vpn.tunnel_cidrs[count.index], 2)
  peer_asn        = var.vpn.peer_bgp_asn
  interface       = google_compute_router_interface.tunnel[count.index].name
}

################################################################################
# The nodes' firewall (docs/topology.md: inbound 10250 from the control plane's network,
# outbound 443 and 10250 to it; the run's nodes talk to each other for the CNI)
################################################################################

resource "google_compute_firewall" "kubelet_from_home" {
  name          = "${local.name}-kubelet"
  project       = var.project_id
  network       = var.network
  description   = "burst run ${var.run_id}: the home control plane to the kubelets (logs, exec)"
  direction     = "INGRESS"
  source_ranges = var.vpn.control_network_cidrs
  target_tags   = [local.name]

  allow {
    protocol = "tcp"
    ports    = ["10250"]
  }

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_firewall" "within_run" {
  name          = "${local.name}-nodes"
  project       = var.project_id
  network       = var.network
  description   = "burst run ${var.run_id}: node to node and pod to pod (CNI overlay, NCCL)"
  direction     = "INGRESS"
  source_ranges = concat(var.node_cidrs, var.pod_cidrs)
  target_tags   = [local.name]

  allow {
    protocol = "all"
  }

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_firewall" "to_home" {
  name               = "${local.name}-home"
  project            = var.project_id
  network            = var.network
  description        = "burst run ${var.run_id}: kubelets to the home API server (443) and kubelet port"
  direction          = "EGRESS"
  destination_ranges = var.vpn.control_network_cidrs
  target_tags        = [local.name]

  allow {
    protocol = "tcp"
    ports    = ["443", "10250"]
  }

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

################################################################################
# GPU nodes: the main group (spot unless on_demand) and an optional on-demand floor,
# each an instance template and a zonal managed instance group; no public address
################################################################################

resource "google_compute_instance_template" "gpu" {
  for_each       = local.pools
  name_prefix    = "${local.name}-${each.key}-"
  project        = var.project_id
  region         = var.region
  machine_type   = var.machine_type
  description    = "burst run ${var.run_id}: ${each.key} GPU nodes (EKS hybrid nodes of ${var.home.cluster_name})"
  labels         = local.labels
  tags           = [local.name]
  can_ip_forward = false

  metadata = {
    user-data                = module.home.user_data
    block-project-ssh-keys   = "true"
    enable-oslogin           = "TRUE"
    serial-port-enable       = "false"
    disable-legacy-endpoints = "true"
  }

  disk {
    source_image = var.image
    boot         = true
    auto_delete  = true
    disk_type    = var.boot_disk_type
    disk_size_gb = var.boot_disk_gb
    labels       = local.labels

    disk_encryption_key {
      kms_key_self_link = var.kms_key_id
    }
  }

  network_interface {
    subnetwork = var.subnetwork
  }

  dynamic "guest_accelerator" {
    for_each = local.attached_gpus ? [] : [var.gpu_type]
    content {
      type  = guest_accelerator.value
      count = var.gpus_per_node
    }
  }

  scheduling {
    provisioning_model          = each.value.spot ? "SPOT" : "STANDARD"
    preemptible                 = each.value.spot
    automatic_restart           = !each.value.spot
    on_host_maintenance         = "TERMINATE"
    instance_termination_action = each.value.spot ? "DELETE" : null
  }

  service_account {
    email  = var.node_service_account
    scopes = ["https://www.googleapis.com/auth/cloud-platform"]
  }

  shielded_instance_config {
    enable_secure_boot          = true
    enable_vtpm                 = true
    enable_integrity_monitoring = true
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "google_compute_instance_group_manager" "gpu" {
  for_each           = local.pools
  name               = "${local.name}-${each.key}"
  project            = var.project_id
  zone               = local.zone
  base_instance_name = "${local.name}-${each.key}"
  target_size        = each.value.size
  wait_for_instances = false

  version {
    name              = each.key
    instance_template = google_compute_instance_template.gpu[each.key].self_link
  }

  depends_on = [
    google_compute_router_peer.tunnel,
    google_compute_firewall.kubelet_from_home,
    google_compute_firewall.to_home,
  ]
}
