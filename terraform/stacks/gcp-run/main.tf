################################################################################
# gcp-run: the root module one run applies in GCP, in one region (the plan's candidate):
# a GKE node pool of GPU machines (spot or on-demand, optional on-demand floor), a GCS
# bucket for checkpoints with a customer-managed key, a Google service account for the
# train pods (Workload Identity) allowed on the run's prefix only, and an HA VPN back to
# the control network. State: GCS, prefix derived from the run id (see versions.tf).
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

  node_labels = {
    "accelerator"    = var.accelerator
    "burst/run-id"   = var.run_id
    "burst/capacity" = var.capacity
  }
  gpu_taint  = { key = "nvidia.com/gpu", value = "present", effect = "NO_SCHEDULE" }
  spot_taint = { key = "spot", value = "true", effect = "NO_SCHEDULE" }
}

provider "google" {
  project        = var.project_id
  region         = var.region
  default_labels = local.labels
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
# Identity of the train pods: Workload Identity, least privilege on the run's prefix
################################################################################

resource "google_service_account" "pod" {
  project      = var.project_id
  account_id   = local.name
  display_name = "burst run ${var.run_id}: train pods"
  description  = "Workload Identity of the train pods of burst run ${var.run_id}; read-write on its checkpoint prefix only."
}

resource "google_service_account_iam_member" "workload_identity" {
  service_account_id = google_service_account.pod.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${var.project_id}.svc.id.goog[${var.namespace}/${local.service_account}]"
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
# GPU nodes: the main pool (spot unless on_demand) and an optional on-demand floor
################################################################################

resource "google_container_node_pool" "gpu" {
  name           = local.name
  project        = var.project_id
  cluster        = var.cluster_id
  node_locations = [local.zone]
  node_count     = local.main_nodes

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type      = var.machine_type
    spot              = local.spot
    disk_size_gb      = var.boot_disk_gb
    disk_type         = "pd-balanced"
    boot_disk_kms_key = var.kms_key_id
    service_account   = var.node_service_account
    oauth_scopes      = ["https://www.googleapis.com/auth/cloud-platform"]
    labels            = local.node_labels
    resource_labels   = local.labels
    metadata          = { "disable-legacy-endpoints" = "true" }

    guest_accelerator {
      type  = var.gpu_type
      count = var.gpus_per_node
      gpu_driver_installation_config {
        gpu_driver_version = "DEFAULT"
      }
    }

    taint {
      key    = local.gpu_taint.key
      value  = local.gpu_taint.value
      effect = local.gpu_taint.effect
    }

    dynamic "taint" {
      for_each = local.spot ? [local.spot_taint] : []
      content {
        key    = taint.value.key
        value  = taint.value.value
        effect = taint.value.effect
      }
    }

    workload_metadata_config {
      mode = "GKE_METADATA"
    }

    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
  }

  depends_on = [google_compute_router_peer.tunnel]
}

resource "google_container_node_pool" "floor" {
  count          = local.floor > 0 ? 1 : 0
  name           = "${local.name}-od"
  project        = var.project_id
  cluster        = var.cluster_id
  node_locations = [local.zone]
  node_count     = local.floor

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type      = var.machine_type
    spot              = false
    disk_size_gb      = var.boot_disk_gb
    disk_type         = "pd-balanced"
    boot_disk_kms_key = var.kms_key_id
    service_account   = var.node_service_account
    oauth_scopes      = ["https://www.googleapis.com/auth/cloud-platform"]
    labels            = merge(local.node_labels, { "burst/capacity" = "on_demand" })
    resource_labels   = local.labels
    metadata          = { "disable-legacy-endpoints" = "true" }

    guest_accelerator {
      type  = var.gpu_type
      count = var.gpus_per_node
      gpu_driver_installation_config {
        gpu_driver_version = "DEFAULT"
      }
    }

    taint {
      key    = local.gpu_taint.key
      value  = local.gpu_taint.value
      effect = local.gpu_taint.effect
    }

    workload_metadata_config {
      mode = "GKE_METADATA"
    }

    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
  }

  depends_on = [google_compute_router_peer.tunnel]
}
