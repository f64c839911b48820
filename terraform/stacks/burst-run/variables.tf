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
  description = "AWS region of this attempt (the plan's candidate); see regions/*.tfvars."

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must look like ap-southeast-1."
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
  description = "More tags for every resource; the burst:* tags above win over these."
  default     = {}
}

################################################################################
# The cluster the run joins (per region, per site)
################################################################################

variable "cluster_name" {
  type        = string
  description = "EKS cluster in var.region that the run's node group joins."
}

variable "cluster_security_group_id" {
  type        = string
  description = "The cluster's security group, attached to the nodes."
  default     = null
}

variable "oidc_provider_arn" {
  type        = string
  description = "ARN of the cluster's IAM OIDC provider (IRSA)."
}

variable "oidc_provider_url" {
  type        = string
  description = "Issuer URL of the cluster's OIDC provider."
}

variable "vpc_id" {
  type        = string
  description = "VPC of the cluster."
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets for the GPU nodes."
}

variable "route_table_ids" {
  type        = list(string)
  description = "Route tables of those subnets (routes to the control network are added)."
  default     = []
}

################################################################################
# Node group
################################################################################

variable "accelerator" {
  type        = string
  description = "GPU type label of the nodes (the spec's compute.gpu_type)."
}

variable "instance_types" {
  type        = list(string)
  description = "GPU instance types offered in var.region, most preferred first (see regions/*.tfvars)."
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

variable "spot_probe" {
  type        = bool
  description = "The spec probes spot from an on-demand fallback (compute.recovery.probe_interval_s): on an on_demand placement the run's pods may read EC2's spot placement scores (aws-run-iam)."
  default     = false
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

variable "ami_type" {
  type        = string
  description = "EKS GPU AMI type."
  default     = "AL2023_x86_64_NVIDIA"
}

################################################################################
# VPN back to the control network
################################################################################

variable "vpn" {
  type = object({
    customer_gateway_ip   = string
    control_network_cidrs = list(string)
    bgp_asn               = optional(number, 65000)
    transit_gateway_id    = optional(string)
    static_routes_only    = optional(bool, true)
  })
  description = "The control network's side of the site-to-site VPN."
}

################################################################################
# Checkpoints
################################################################################

variable "checkpoint_replication" {
  type = object({
    destination_bucket_arn  = string
    destination_kms_key_arn = string
  })
  description = "Optional cross-region replication of the checkpoints. Null: none."
  default     = null
}

variable "access_log_bucket" {
  type        = string
  description = "Bucket receiving S3 access logs of the checkpoint bucket. Null: none."
  default     = null
}

variable "run_store_uri" {
  type        = string
  description = "The run's own checkpoint store (s3://bucket/<path>/<run id>; burst passes the spec's storage.checkpoint_uri under the run id): the run's pods may read and write it. Null: none."
  default     = null

  validation {
    condition     = var.run_store_uri == null || can(regex("^s3://[a-z0-9.-]+/[^*]+$", var.run_store_uri))
    error_message = "run_store_uri must be s3://bucket/prefix or null."
  }
}

variable "exchange_uri" {
  type        = string
  description = "A regional-sync run's exchange store (s3://bucket/prefix; burst passes it to each region's stack): the region's pods may read and write it. Null: not a regional-sync run."
  default     = null

  validation {
    condition     = var.exchange_uri == null || can(regex("^s3://[a-z0-9.-]+/[^*]+$", var.exchange_uri))
    error_message = "exchange_uri must be s3://bucket/prefix or null."
  }
}

variable "store_kms_key_arn" {
  type        = string
  description = "The key of the exchange store's objects (the spec's storage.kms_key_id), or null."
  default     = null
}

variable "state_bucket" {
  type        = string
  description = "The runs' Terraform state bucket (burst passes its backend's): the run's pods renew their heartbeat there. Null: none."
  default     = null
}
