################################################################################
# The run
################################################################################

variable "run_id" {
  type        = string
  description = "The burst run id (also the state key: burst/runs/<run_id>/terraform.tfstate)."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,100}$", var.run_id))
    error_message = "run_id must be lowercase letters, digits, '.' and '-'."
  }
}

variable "region" {
  type        = string
  description = "Nebius region of this attempt (the plan's candidate)."

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]$", var.region))
    error_message = "region must look like eu-north1."
  }
}

variable "expires_at" {
  type        = string
  description = "RFC 3339 UTC time after which the reaper may destroy the run (tag burst:expires-at)."

  validation {
    condition     = can(formatdate("YYYY", var.expires_at))
    error_message = "expires_at must be an RFC 3339 timestamp, e.g. 2026-01-31T12:00:00Z."
  }
}

variable "owner" {
  type        = string
  description = "Who owns the run (tag burst:owner)."
}

variable "team" {
  type        = string
  description = "Team that runs it (tag burst:team)."
}

variable "cost_centre" {
  type        = string
  description = "Cost centre billed (tag burst:cost-centre)."
}

variable "extra_tags" {
  type        = map(string)
  description = "More tags for every resource; the burst:* tags win over these."
  default     = {}
}

################################################################################
# The site: project, network, home cluster (per region, per site)
################################################################################

variable "project_id" {
  type        = string
  description = "Nebius project (in var.region) of the run's resources."
}

variable "network_id" {
  type        = string
  description = "VPC network of the subnet (the nodes' security group belongs to it)."
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

variable "node_cidrs" {
  type        = list(string)
  description = "The address range(s) the nodes have addresses in (RFC 1918): the home cluster's remote node networks must cover them."
}

variable "pod_cidrs" {
  type        = list(string)
  description = "The nodes' pod network, when webhooks run on them (RFC 1918; covered by the home cluster's remote pod networks). Empty: none."
  default     = []
}

variable "subnet_id" {
  type        = string
  description = "Private subnet of the GPU nodes (no public addresses; its range is in node_cidrs); routed to the control network by the site's VPN. Outbound HTTPS to AWS (SSM, STS, EKS, ECR) goes through the site's NAT or the VPN."
}

variable "gpu_cluster_id" {
  type        = string
  description = "GPU cluster (InfiniBand fabric) for multi-node runs; null: none."
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

variable "image_family" {
  type        = string
  description = "Public image family of the GPU nodes' boot disks (a Linux nodeadm supports with the NVIDIA driver), e.g. ubuntu22.04-cuda12."
  default     = "ubuntu22.04-cuda12"
}

variable "accelerator" {
  type        = string
  description = "GPU type label of the nodes (the spec's compute.gpu_type)."
}

variable "platform" {
  type        = string
  description = "GPU platform (the candidate's instance), e.g. gpu-h100-sxm, gpu-h200-sxm, gpu-b200-sxm."
}

variable "preset" {
  type        = string
  description = "Resource preset of the platform, e.g. 8gpu-128vcpu-1600gb."
  default     = "8gpu-128vcpu-1600gb"
}

variable "boot_disk_type" {
  type        = string
  description = "Boot disk type of each node. NETWORK_SSD_NON_REPLICATED and NETWORK_SSD_IO_M3 are encrypted with the platform's managed key (the only types that offer it); NETWORK_SSD is not."
  default     = "NETWORK_SSD_IO_M3"

  validation {
    condition     = contains(["NETWORK_SSD", "NETWORK_HDD", "NETWORK_SSD_NON_REPLICATED", "NETWORK_SSD_IO_M3"], var.boot_disk_type)
    error_message = "boot_disk_type must be NETWORK_SSD, NETWORK_HDD, NETWORK_SSD_NON_REPLICATED or NETWORK_SSD_IO_M3."
  }
}

variable "boot_disk_gb" {
  type        = number
  description = "Boot disk of each node, GiB (186 = 2 x 93 GiB: non-replicated disk types are allocated in 93 GiB steps on Nebius's sister platform; check docs.nebius.com/compute/storage/types before changing)."
  default     = 186
}

variable "capacity" {
  type        = string
  description = "The candidate's capacity: spot (preemptible), on_demand or spot_with_floor (preemptible plus on_demand_floor regular nodes)."
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
  description = "Regular nodes under spot_with_floor (the candidate's floor_nodes), out of node_count."
  default     = 0

  validation {
    condition     = var.on_demand_floor >= 0 && (var.capacity != "spot_with_floor" || (var.on_demand_floor >= 1 && var.on_demand_floor < var.node_count))
    error_message = "on_demand_floor must be at least 1 and less than node_count under spot_with_floor."
  }
}

################################################################################
# Network back home (a site prerequisite on Nebius)
################################################################################

variable "vpn" {
  type = object({
    gateway_id            = string
    control_network_cidrs = list(string)
  })
  description = "The site's VPN gateway to the control network (Nebius has no managed site-to-site VPN resource: a gateway VM of the site) and the control network's CIDRs."
}
