variable "run_id" {
  type        = string
  description = "The burst run id; every resource is keyed and tagged by it."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,100}$", var.run_id))
    error_message = "run_id must be lowercase letters, digits, '.' and '-'."
  }
}

variable "region" {
  type        = string
  description = "The region this emulated node group stands for (from the plan's candidate)."
}

variable "cloud_provider" {
  type        = string
  description = "The provider this emulated node group stands for (aws, gcp, azure, nebius, oci): its capacity errors and outputs are emulated."
}

variable "capacity" {
  type        = string
  description = "The candidate's capacity: spot, on_demand or spot_with_floor (spot plus on-demand floor nodes)."
  default     = "spot"

  validation {
    condition     = contains(["spot", "on_demand", "spot_with_floor"], var.capacity)
    error_message = "capacity must be spot, on_demand or spot_with_floor (a plan candidate's capacity)."
  }
}

variable "gpu_type" {
  type        = string
  description = "Accelerator label the node group carries (node selector for the train step)."
}

variable "node_count" {
  type        = number
  description = "Number of emulated nodes."
  default     = 1

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 64
    error_message = "node_count must be between 1 and 64."
  }
}

variable "tags" {
  type        = map(string)
  description = "Run tags (burst:run-id, burst:expires-at, owner, team, cost centre), merged everywhere."
  default     = {}
}

variable "simulate_no_capacity" {
  type        = list(string)
  description = "Regions where the node group fails at apply time with an emulated InsufficientInstanceCapacity error (tests and fault injection)."
  default     = []
}

variable "fail_midway" {
  type        = bool
  description = "Fail at apply time after the VPN and node group exist, before the nodes (fault injection: provision:midway)."
  default     = false
}

variable "site" {
  type        = map(string)
  description = "The candidate's site variables (what a cloud stack takes from BURST_TF_SITE_VARS), each JSON-encoded; recorded on the emulated VPN and node group."
  default     = {}
}

variable "gpus_per_node" {
  type        = number
  description = "GPUs on each node (the run's gpus-per-node: the candidate's GPUs over its nodes), recorded on each emulated node. Null: the site's gpus_per_node, else 8."
  default     = null

  validation {
    condition     = var.gpus_per_node == null || try(var.gpus_per_node >= 1 && var.gpus_per_node <= 16 && floor(var.gpus_per_node) == var.gpus_per_node, false)
    error_message = "gpus_per_node must be a whole number from 1 to 16."
  }
}

variable "on_demand_floor" {
  type        = number
  description = "With capacity spot_with_floor: how many of the node_count nodes are on-demand (the last ones), as the cloud stacks take it. Null: the site's on_demand_floor, else 1. Ignored for other capacities."
  default     = null

  validation {
    condition     = var.on_demand_floor == null || try(var.on_demand_floor >= 0 && floor(var.on_demand_floor) == var.on_demand_floor, false)
    error_message = "on_demand_floor must be a whole number, 0 or more."
  }
}
