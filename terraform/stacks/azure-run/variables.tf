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
  description = "Azure region of this attempt (the plan's candidate), e.g. southeastasia."

  validation {
    condition     = can(regex("^[a-z]+[a-z0-9]*$", var.region))
    error_message = "region must be an Azure region name like southeastasia."
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
# The site: subscription, cluster, network, key vault (per region, per site)
################################################################################

variable "subscription_id" {
  type        = string
  description = "Azure subscription of the cluster and the run's resources."
}

variable "resource_group_name" {
  type        = string
  description = "Resource group (in var.region) the run's resources are created in."
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

variable "node_subnet_id" {
  type        = string
  description = "Subnet of the GPU nodes (its range is in node_cidrs; also where the storage account's private endpoint goes). Outbound HTTPS to AWS (SSM, STS, EKS, ECR) goes through the site's NAT gateway or the VPN."
}

variable "zones" {
  type        = list(string)
  description = "Availability zones of the nodes (the first is used); [] where the region has none."
  default     = []
}

variable "key_vault_id" {
  type        = string
  description = "Key vault (RBAC authorisation, purge protection on) holding the customer-managed key."
}

variable "key_vault_key_id" {
  type        = string
  description = "Versionless id of the customer-managed key that encrypts the storage account."
}

variable "namespace" {
  type        = string
  description = "Kubernetes namespace of the train pods."
  default     = "burst"
}

################################################################################
# GPU nodes
################################################################################

variable "image_id" {
  type        = string
  description = "Image of the GPU nodes (an image or gallery image version id): a Linux nodeadm supports (Ubuntu, RHEL) with the NVIDIA driver."
}

variable "admin_ssh_public_key" {
  type        = string
  description = "Public SSH key of the nodes' admin user (break-glass; password login is disabled). A public key, not a secret."
}

variable "disk_encryption_set_id" {
  type        = string
  description = "Disk encryption set (customer-managed key) of the nodes' OS disks; null: platform-managed keys (host encryption is on either way)."
  default     = null
}

variable "boot_disk_gb" {
  type        = number
  description = "OS disk of each node, GB."
  default     = 200
}

variable "accelerator" {
  type        = string
  description = "GPU type label of the nodes (the spec's compute.gpu_type)."
}

variable "vm_size" {
  type        = string
  description = "GPU VM size (the candidate's instance, e.g. Standard_ND96isr_H100_v5)."
}

variable "capacity" {
  type        = string
  description = "The candidate's capacity: spot, on_demand or spot_with_floor (spot plus on_demand_floor regular nodes)."
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
  description = "Regular (on-demand) nodes under spot_with_floor (the candidate's floor_nodes), out of node_count."
  default     = 0

  validation {
    condition     = var.on_demand_floor >= 0 && (var.capacity != "spot_with_floor" || (var.on_demand_floor >= 1 && var.on_demand_floor < var.node_count))
    error_message = "on_demand_floor must be at least 1 and less than node_count under spot_with_floor."
  }
}

################################################################################
# VPN back to the control network
################################################################################

variable "vpn" {
  type = object({
    customer_gateway_ip   = string
    control_network_cidrs = list(string)
    gateway_subnet_id     = optional(string)
    gateway_id            = optional(string)
  })
  description = "The control network's side of the site-to-site VPN. gateway_id: an existing VPN gateway of the site (creating one takes 30-45 minutes); else gateway_subnet_id (the VNet's GatewaySubnet) for a new one."

  validation {
    condition     = var.vpn.gateway_id != null || var.vpn.gateway_subnet_id != null
    error_message = "vpn needs gateway_id (an existing VPN gateway) or gateway_subnet_id (to create one)."
  }
}

variable "vpn_shared_secret" {
  type        = string
  description = "IPsec pre-shared key: pass it from a secret store (TF_VAR_vpn_shared_secret), never in a file."
  sensitive   = true
}
