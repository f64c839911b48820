variable "run_id" {
  type        = string
  description = "The burst run id; names the role and the activation and is tagged on them."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,100}$", var.run_id))
    error_message = "run_id must be lowercase letters, digits, '.' and '-'."
  }
}

variable "cluster_name" {
  type        = string
  description = "The home EKS cluster the run's workflow runs in; the rented nodes join it."
}

variable "expires_at" {
  type        = string
  description = "RFC 3339 time the run expires; the activation expires with it (SSM allows at most 30 days ahead)."

  validation {
    condition     = can(formatdate("YYYY", var.expires_at))
    error_message = "expires_at must be an RFC 3339 timestamp."
  }
}

variable "node_count" {
  type        = number
  description = "How many nodes may register with the activation (the run's node count)."

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 1000 && floor(var.node_count) == var.node_count
    error_message = "node_count must be a whole number from 1 to 1000."
  }
}

variable "registrations_per_node" {
  type        = number
  description = "Registrations the activation allows per node: the first boot, and every VM that replaces a preempted one (each registers as a new managed instance)."
  default     = 8

  validation {
    condition     = var.registrations_per_node >= 1 && var.registrations_per_node <= 100 && floor(var.registrations_per_node) == var.registrations_per_node
    error_message = "registrations_per_node must be a whole number from 1 to 100."
  }
}

variable "remote_node_cidrs" {
  type        = list(string)
  description = "The site network the run's nodes have addresses in (RFC 1918, covered by the cluster's remote node networks)."

  validation {
    condition = length(var.remote_node_cidrs) >= 1 && alltrue([
      for c in var.remote_node_cidrs : can(cidrhost(c, 0)) && can(regex("^(10\\.|192\\.168\\.|172\\.(1[6-9]|2[0-9]|3[01])\\.)", c))
    ])
    error_message = "remote_node_cidrs needs at least one IPv4 RFC 1918 CIDR (EKS hybrid nodes take no public ranges)."
  }
}

variable "remote_pod_cidrs" {
  type        = list(string)
  description = "The pod network of the run's nodes, when webhooks run there (RFC 1918, covered by the cluster's remote pod networks). Empty: none."
  default     = []

  validation {
    condition = alltrue([
      for c in var.remote_pod_cidrs : can(cidrhost(c, 0)) && can(regex("^(10\\.|192\\.168\\.|172\\.(1[6-9]|2[0-9]|3[01])\\.)", c))
    ])
    error_message = "remote_pod_cidrs must be IPv4 RFC 1918 CIDRs."
  }
}

variable "home_routing" {
  type = object({
    route_table_ids    = list(string)
    transit_gateway_id = optional(string)
    vpn_gateway_id     = optional(string)
  })
  description = "Route tables of the home cluster's subnets and the gateway the VPN to the site ends on (a transit gateway, else a VPN gateway); the run adds routes to its remote networks and opens the cluster security group to them on 443. Null: those routes and rules are standing configuration of the home network."
  default     = null

  validation {
    condition     = var.home_routing == null || try(length(var.home_routing.route_table_ids) >= 1 && (var.home_routing.transit_gateway_id != null || var.home_routing.vpn_gateway_id != null), false)
    error_message = "home_routing needs at least one route table and a transit_gateway_id or a vpn_gateway_id."
  }
}

variable "node_labels" {
  type        = map(string)
  description = "Labels the nodes register with (burst/run-id is added); the train step's node selector."
  default     = {}
}

variable "node_taints" {
  type        = list(string)
  description = "Taints (key=value:Effect) the nodes register with besides nvidia.com/gpu=present:NoSchedule."
  default     = []

  validation {
    condition     = alltrue([for t in var.node_taints : can(regex("^[A-Za-z0-9./_-]+=[A-Za-z0-9._-]*:(NoSchedule|PreferNoSchedule|NoExecute)$", t))])
    error_message = "node_taints must be key=value:Effect (Effect NoSchedule, PreferNoSchedule or NoExecute)."
  }
}

variable "permissions_boundary_arn" {
  type        = string
  description = "Permissions boundary set on the nodes' role, if the organisation requires one."
  default     = null
}

variable "tags" {
  type        = map(string)
  description = "Run tags (burst:run-id, burst:expires-at, burst:owner, burst:team, burst:cost-centre), merged into every resource."
  default     = {}
}

variable "kubernetes_version" {
  type        = string
  description = "Kubernetes minor version nodeadm installs on the nodes (e.g. 1.33); null: the home cluster's version."
  default     = null

  validation {
    condition     = var.kubernetes_version == null || can(regex("^1\\.[0-9]+$", var.kubernetes_version))
    error_message = "kubernetes_version must be a minor version such as 1.33."
  }
}

variable "nodeadm_url" {
  type        = string
  description = "Where the nodes download the hybrid-nodes nodeadm binary (https; SSM needs nodeadm 1.0.19 or later)."
  default     = "https://hybrid-assets.eks.amazonaws.com/releases/latest/bin/linux/amd64/nodeadm"

  validation {
    condition     = startswith(var.nodeadm_url, "https://")
    error_message = "nodeadm_url must be an https URL."
  }
}
