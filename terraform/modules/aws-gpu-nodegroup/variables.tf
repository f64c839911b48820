variable "run_id" {
  type        = string
  description = "The burst run id; names the node groups and is tagged on every resource."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,100}$", var.run_id))
    error_message = "run_id must be lowercase letters, digits, '.' and '-'."
  }
}

variable "cluster_name" {
  type        = string
  description = "Name of the EKS cluster the node groups join."
}

variable "vpc_id" {
  type        = string
  description = "VPC of the cluster; the nodes' security group is created in it."
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets for the nodes (several zones widen the capacity pool)."

  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "subnet_ids needs at least one subnet."
  }
}

variable "node_role_arn" {
  type        = string
  description = "ARN of the nodes' EC2 role (aws-run-iam's node_role_arn)."
}

variable "instance_types" {
  type        = list(string)
  description = "GPU instance types, most preferred first; several types diversify spot capacity."

  validation {
    condition     = length(var.instance_types) >= 1 && length(var.instance_types) <= 20
    error_message = "instance_types needs between 1 and 20 types."
  }
}

variable "capacity_type" {
  type        = string
  description = "Capacity of the main node group: SPOT or ON_DEMAND."
  default     = "SPOT"

  validation {
    condition     = contains(["SPOT", "ON_DEMAND"], var.capacity_type)
    error_message = "capacity_type must be SPOT or ON_DEMAND."
  }
}

variable "on_demand_floor" {
  type        = number
  description = "Nodes of a second, on-demand node group that stays when spot nodes are reclaimed (0: none)."
  default     = 0

  validation {
    condition     = var.on_demand_floor >= 0 && var.on_demand_floor <= 64
    error_message = "on_demand_floor must be between 0 and 64."
  }
}

variable "desired_size" {
  type        = number
  description = "Nodes the main group starts with."
  default     = 1

  validation {
    condition     = var.desired_size >= 0 && var.desired_size <= 512
    error_message = "desired_size must be between 0 and 512."
  }
}

variable "min_size" {
  type        = number
  description = "Lower scaling bound of the main group."
  default     = 0

  validation {
    condition     = var.min_size >= 0
    error_message = "min_size must not be negative."
  }
}

variable "max_size" {
  type        = number
  description = "Upper scaling bound of the main group (caps the run's spend)."
  default     = 8

  validation {
    condition     = var.max_size >= 1 && var.max_size <= 512
    error_message = "max_size must be between 1 and 512."
  }
}

variable "accelerator" {
  type        = string
  description = "Value of the node label `accelerator` (the GPU type, e.g. h100, rubin); the train step selects on it."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9._-]{0,62}$", var.accelerator))
    error_message = "accelerator must be a valid Kubernetes label value in lowercase."
  }
}

variable "labels" {
  type        = map(string)
  description = "Extra Kubernetes labels of the nodes."
  default     = {}
}

variable "ami_type" {
  type        = string
  description = "EKS AMI type of the nodes (a GPU AMI)."
  default     = "AL2023_x86_64_NVIDIA"

  validation {
    condition     = can(regex("NVIDIA|GPU|NEURON", var.ami_type))
    error_message = "ami_type must be a GPU (NVIDIA, GPU or NEURON) AMI type."
  }
}

variable "disk_size_gb" {
  type        = number
  description = "Size of each node's encrypted root volume."
  default     = 200

  validation {
    condition     = var.disk_size_gb >= 50 && var.disk_size_gb <= 16384
    error_message = "disk_size_gb must be between 50 and 16384."
  }
}

variable "ebs_kms_key_arn" {
  type        = string
  description = "Customer-managed key for the volumes. Null: the account's default EBS key (volumes are encrypted either way)."
  default     = null
}

variable "control_network_cidrs" {
  type        = list(string)
  description = "CIDRs of the control network (over the VPN) that may reach the nodes. Never 0.0.0.0/0."
  default     = []

  validation {
    condition     = alltrue([for c in var.control_network_cidrs : can(cidrhost(c, 0)) && !contains(["0.0.0.0/0", "::/0"], c)])
    error_message = "control_network_cidrs must be valid CIDRs and never 0.0.0.0/0 or ::/0."
  }
}

variable "cluster_security_group_id" {
  type        = string
  description = "The cluster's security group, attached to the nodes as well."
  default     = null
}

variable "tags" {
  type        = map(string)
  description = "Run tags (burst:run-id, burst:expires-at, burst:owner, burst:team, burst:cost-centre), merged into every resource."
  default     = {}
}
