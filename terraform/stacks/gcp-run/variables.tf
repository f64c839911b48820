################################################################################
# The run
################################################################################

variable "run_id" {
  type        = string
  description = "The burst run id (also the state prefix: burst/runs/<run_id>)."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,100}$", var.run_id))
    error_message = "run_id must be lowercase letters, digits, '.' and '-'."
  }
}

variable "region" {
  type        = string
  description = "GCP region of this attempt (the plan's candidate), e.g. asia-southeast1."

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]$", var.region))
    error_message = "region must look like asia-southeast1."
  }
}

variable "expires_at" {
  type        = string
  description = "RFC 3339 UTC time after which the reaper may destroy the run (label burst-expires-at)."

  validation {
    condition     = can(formatdate("YYYY", var.expires_at))
    error_message = "expires_at must be an RFC 3339 timestamp, e.g. 2026-01-31T12:00:00Z."
  }
}

variable "owner" {
  type        = string
  description = "Who owns the run (label burst-owner)."
}

variable "team" {
  type        = string
  description = "Team that runs it (label burst-team)."
}

variable "cost_centre" {
  type        = string
  description = "Cost centre billed (label burst-cost-centre)."
}

variable "extra_tags" {
  type        = map(string)
  description = "More labels for every resource (keys and values are normalised to GCP label syntax)."
  default     = {}
}

################################################################################
# The site: project, cluster, network, key (per region, per site)
################################################################################

variable "project_id" {
  type        = string
  description = "GCP project of the nodes, the bucket and the run's identity."
}

variable "zones" {
  type        = list(string)
  description = "Zones of var.region where the GPU machines may run (the first is used)."
}

variable "network" {
  type        = string
  description = "Self link or name of the site's VPC network (the HA VPN and the nodes' firewall rules attach to it)."
}

variable "subnetwork" {
  type        = string
  description = "Self link of the site subnetwork the nodes get their (private) addresses in; its range is in node_cidrs. Outbound HTTPS to AWS (SSM, STS, EKS, ECR) goes through the site's Cloud NAT or the VPN."
}

variable "node_cidrs" {
  type        = list(string)
  description = "The site subnetwork's range(s) the nodes have addresses in (RFC 1918): the home cluster's remote node networks must cover them."
}

variable "pod_cidrs" {
  type        = list(string)
  description = "The nodes' pod network, when webhooks run on them (RFC 1918; covered by the home cluster's remote pod networks). Empty: none."
  default     = []
}

variable "image" {
  type        = string
  description = "Boot image of the GPU nodes (self link or family): a Linux nodeadm supports (Ubuntu, RHEL, AL2023) with the NVIDIA driver."
}

variable "home" {
  type = object({
    cluster_name             = string
    region                   = string
    kubernetes_version       = optional(string)
    permissions_boundary_arn = optional(string)
    routing = optional(object({
      route_table_ids    = list(string)
      transit_gateway_id = optional(string)
      vpn_gateway_id     = optional(string)
    }))
  })
  description = "The home EKS cluster the nodes join as hybrid nodes (terraform/modules/aws-hybrid-join): its name and region, optionally the Kubernetes version, the nodes' role's permissions boundary and the home VPC's routing (null: standing configuration)."
}

variable "node_service_account" {
  type        = string
  description = "Email of the least-privilege service account the GPU nodes run as (logging and metrics writer only)."
}

variable "kms_key_id" {
  type        = string
  description = "Customer-managed key (projects/P/locations/R/keyRings/K/cryptoKeys/C) for the bucket and boot disks; the Cloud Storage and Compute Engine service agents must be allowed to use it."
}

variable "bucket_location" {
  type        = string
  description = "Location of the checkpoint bucket; null: var.region (the key must be in the same location)."
  default     = null
}

variable "namespace" {
  type        = string
  description = "Kubernetes namespace of the train pods."
  default     = "burst"
}

################################################################################
# GPU nodes
################################################################################

variable "accelerator" {
  type        = string
  description = "GPU type label of the nodes (the spec's compute.gpu_type)."
}

variable "machine_type" {
  type        = string
  description = "GPU machine type (the candidate's instance, e.g. a3-highgpu-8g)."
}

variable "gpu_type" {
  type        = string
  description = "Accelerator type of the machine, e.g. nvidia-h100-80gb (attached as guest accelerators to machine types other than a2/a3/a4/g2, which come with theirs)."
}

variable "gpus_per_node" {
  type        = number
  description = "GPUs per machine (8 for a3-highgpu-8g)."
  default     = 8
}

variable "capacity" {
  type        = string
  description = "The candidate's capacity: spot, on_demand or spot_with_floor (spot plus on_demand_floor on-demand nodes)."
  default     = "spot"

  validation {
    condition     = contains(["spot", "on_demand", "spot_with_floor"], var.capacity)
    error_message = "capacity must be spot, on_demand or spot_with_floor (a plan candidate's capacity)."
  }
}

variable "node_count" {
  type        = number
  description = "Nodes the run needs."
  default     = 1

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 512
    error_message = "node_count must be between 1 and 512."
  }
}

variable "on_demand_floor" {
  type        = number
  description = "On-demand nodes under spot_with_floor (the candidate's floor_nodes), out of node_count."
  default     = 0

  validation {
    condition     = var.on_demand_floor >= 0 && (var.capacity != "spot_with_floor" || (var.on_demand_floor >= 1 && var.on_demand_floor < var.node_count))
    error_message = "on_demand_floor must be at least 1 and less than node_count under spot_with_floor."
  }
}

variable "boot_disk_type" {
  type        = string
  description = "Boot disk type of each node (pd-balanced; hyperdisk-balanced on machine types that need it, e.g. a4)."
  default     = "pd-balanced"
}

variable "boot_disk_gb" {
  type        = number
  description = "Boot disk of each node, GB."
  default     = 200
}

################################################################################
# HA VPN back to the control network
################################################################################

variable "vpn" {
  type = object({
    peer_ip_addresses     = list(string)
    control_network_cidrs = list(string)
    peer_bgp_asn          = optional(number, 65000)
    router_bgp_asn        = optional(number, 64514)
    tunnel_cidrs          = optional(list(string), ["169.254.10.0/30", "169.254.11.0/30"])
  })
  description = "The control network's side of the HA VPN: one or two peer gateway addresses, its CIDRs, BGP."

  validation {
    condition     = length(var.vpn.peer_ip_addresses) >= 1 && length(var.vpn.peer_ip_addresses) <= 2 && length(var.vpn.tunnel_cidrs) == 2
    error_message = "vpn needs one or two peer_ip_addresses and two tunnel_cidrs."
  }
}

variable "vpn_shared_secret" {
  type        = string
  description = "IKE pre-shared key of the tunnels: pass it from a secret store (TF_VAR_vpn_shared_secret), never in a file."
  sensitive   = true
}
