variable "run_id" {
  type        = string
  description = "The burst run id; names the VPN resources and is tagged on them."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,100}$", var.run_id))
    error_message = "run_id must be lowercase letters, digits, '.' and '-'."
  }
}

variable "vpc_id" {
  type        = string
  description = "VPC of the run's nodes (attached to the VPN gateway when no transit gateway is given)."
}

variable "route_table_ids" {
  type        = list(string)
  description = "Route tables of the nodes' subnets; they get routes to the control network through the VPN."
  default     = []
}

variable "transit_gateway_id" {
  type        = string
  description = "Existing transit gateway to attach the VPN to. Null: a VPN gateway attached to vpc_id."
  default     = null
}

variable "customer_gateway_ip" {
  type        = string
  description = "Public IPv4 address of the control network's VPN endpoint."

  validation {
    condition     = can(regex("^(\\d{1,3}\\.){3}\\d{1,3}$", var.customer_gateway_ip))
    error_message = "customer_gateway_ip must be an IPv4 address."
  }
}

variable "customer_gateway_bgp_asn" {
  type        = number
  description = "BGP ASN of the control network's side."
  default     = 65000

  validation {
    condition     = var.customer_gateway_bgp_asn >= 1 && var.customer_gateway_bgp_asn <= 4294967294
    error_message = "customer_gateway_bgp_asn must be a valid ASN."
  }
}

variable "amazon_side_asn" {
  type        = number
  description = "BGP ASN of the AWS side of a new VPN gateway."
  default     = 64512
}

variable "control_network_cidrs" {
  type        = list(string)
  description = "CIDRs of the control network reached through the VPN (training traffic and checkpoints stay off the internet)."

  validation {
    condition     = length(var.control_network_cidrs) >= 1 && alltrue([for c in var.control_network_cidrs : can(cidrhost(c, 0)) && !contains(["0.0.0.0/0", "::/0"], c)])
    error_message = "control_network_cidrs needs at least one valid CIDR, never 0.0.0.0/0 or ::/0."
  }
}

variable "static_routes_only" {
  type        = bool
  description = "Static routes (true) or BGP (false) between the two sides."
  default     = true
}

variable "tunnel_log_retention_days" {
  type        = number
  description = "Days the tunnels' logs are kept in CloudWatch."
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.tunnel_log_retention_days)
    error_message = "tunnel_log_retention_days must be a CloudWatch retention value."
  }
}

variable "log_kms_key_arn" {
  type        = string
  description = "KMS key that encrypts the tunnel log group (e.g. the run's checkpoint key, whose policy must allow CloudWatch Logs). Null: CloudWatch's own encryption."
  default     = null
}

variable "tags" {
  type        = map(string)
  description = "Run tags (burst:run-id, burst:expires-at, burst:owner, burst:team, burst:cost-centre), merged into every resource."
  default     = {}
}
