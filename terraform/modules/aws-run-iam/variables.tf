variable "run_id" {
  type        = string
  description = "The burst run id; names the roles and is tagged on them."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,100}$", var.run_id))
    error_message = "run_id must be lowercase letters, digits, '.' and '-'."
  }
}

variable "oidc_provider_arn" {
  type        = string
  description = "ARN of the EKS cluster's IAM OIDC provider (IRSA)."

  validation {
    condition     = can(regex("^arn:[a-z-]+:iam::[0-9]{12}:oidc-provider/", var.oidc_provider_arn))
    error_message = "oidc_provider_arn must be an IAM OIDC provider ARN."
  }
}

variable "oidc_provider_url" {
  type        = string
  description = "Issuer URL of the cluster's OIDC provider, with or without https://."
}

variable "namespace" {
  type        = string
  description = "Kubernetes namespace of the run's service account."
  default     = "burst"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.namespace))
    error_message = "namespace must be a DNS-1123 label."
  }
}

variable "service_account" {
  type        = string
  description = "Kubernetes service account of the run's pods. Null: burst-<run_id>."
  default     = null
}

variable "bucket_arn" {
  type        = string
  description = "ARN of the checkpoint bucket."

  validation {
    condition     = can(regex("^arn:[a-z-]+:s3:::[a-z0-9.-]+$", var.bucket_arn))
    error_message = "bucket_arn must be an S3 bucket ARN."
  }
}

variable "checkpoint_prefix" {
  type        = string
  description = "The run's key prefix in the bucket (ends with '/'); the role may touch nothing else."

  validation {
    condition     = can(regex("^[^*]+/$", var.checkpoint_prefix))
    error_message = "checkpoint_prefix must end with '/' and contain no '*'."
  }
}

variable "state_bucket_arn" {
  type        = string
  description = "ARN of the runs' Terraform state bucket: the train pods renew the run's heartbeat there (burst/runs/<run id>/heartbeat/, read by the reaper). Null: no heartbeat access (a local state store)."
  default     = null

  validation {
    condition     = var.state_bucket_arn == null || can(regex("^arn:[a-z-]+:s3:::[a-z0-9.-]+$", var.state_bucket_arn))
    error_message = "state_bucket_arn must be an S3 bucket ARN or null."
  }
}

variable "run_store_bucket_arn" {
  type        = string
  description = "ARN of the bucket of the run's own checkpoint store (the spec's storage.checkpoint_uri): the pods read and write run_store_prefix there. Null: none (a store outside S3)."
  default     = null

  validation {
    condition     = var.run_store_bucket_arn == null || can(regex("^arn:[a-z-]+:s3:::[a-z0-9.-]+$", var.run_store_bucket_arn))
    error_message = "run_store_bucket_arn must be an S3 bucket ARN or null."
  }
}

variable "run_store_prefix" {
  type        = string
  description = "Key prefix of the run's store in run_store_bucket_arn (<path>/<run id>/, ends with '/')."
  default     = null

  validation {
    condition     = var.run_store_prefix == null || can(regex("^[^*]+/$", var.run_store_prefix))
    error_message = "run_store_prefix must end with '/' and contain no '*'."
  }
}

variable "exchange_bucket_arn" {
  type        = string
  description = "ARN of the bucket of a regional-sync run's exchange store (the spec's storage.checkpoint_uri): every region's pods read and write exchange_prefix there. Null: not a regional-sync run."
  default     = null

  validation {
    condition     = var.exchange_bucket_arn == null || can(regex("^arn:[a-z-]+:s3:::[a-z0-9.-]+$", var.exchange_bucket_arn))
    error_message = "exchange_bucket_arn must be an S3 bucket ARN or null."
  }
}

variable "exchange_prefix" {
  type        = string
  description = "Key prefix of the exchange store in exchange_bucket_arn (ends with '/')."
  default     = null

  validation {
    condition     = var.exchange_prefix == null || can(regex("^[^*]+/$", var.exchange_prefix))
    error_message = "exchange_prefix must end with '/' and contain no '*'."
  }
}

variable "store_kms_key_arn" {
  type        = string
  description = "ARN of the key the exchange store's objects are encrypted with (the spec's storage.kms_key_id), or null (the bucket's default encryption)."
  default     = null
}

variable "kms_key_arn" {
  type        = string
  description = "ARN of the key that encrypts the checkpoints."

  validation {
    condition     = can(regex("^arn:[a-z-]+:kms:", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN."
  }
}

variable "spot_probe" {
  type        = bool
  description = "The run's pods probe spot from an on-demand fallback (burst.train.spot_probe): allow ec2:GetSpotPlacementScores."
  default     = false
}

variable "create_node_role" {
  type        = bool
  description = "Also create the EC2 role of the run's node group (worker, CNI and read-only registry policies)."
  default     = true
}

variable "permissions_boundary_arn" {
  type        = string
  description = "Permissions boundary set on every role, if the organisation requires one."
  default     = null
}

variable "tags" {
  type        = map(string)
  description = "Run tags (burst:run-id, burst:expires-at, burst:owner, burst:team, burst:cost-centre), merged into every resource."
  default     = {}
}
