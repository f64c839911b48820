variable "run_id" {
  type        = string
  description = "The burst run id; names the checkpoint prefix and is tagged on every resource."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,100}$", var.run_id))
    error_message = "run_id must be lowercase letters, digits, '.' and '-'."
  }
}

variable "bucket_name" {
  type        = string
  description = "Name of the checkpoint bucket. Null: a unique name from bucket_prefix."
  default     = null

  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be 3-63 lowercase letters, digits, '.' and '-'."
  }
}

variable "bucket_prefix" {
  type        = string
  description = "Prefix of the generated bucket name when bucket_name is null."
  default     = "burst-ckpt-"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,36}$", var.bucket_prefix))
    error_message = "bucket_prefix must be at most 37 lowercase letters, digits, '.' and '-'."
  }
}

variable "checkpoint_prefix" {
  type        = string
  description = "Key prefix under which the run's checkpoints live (the run's IAM role is limited to it). Null: runs/<run_id>/."
  default     = null
}

variable "noncurrent_days" {
  type        = number
  description = "Days after which old (noncurrent) chunk versions are deleted."
  default     = 7

  validation {
    condition     = var.noncurrent_days >= 1 && var.noncurrent_days <= 3650
    error_message = "noncurrent_days must be between 1 and 3650."
  }
}

variable "expire_after_days" {
  type        = number
  description = "Days after which the run's checkpoints expire (0: never)."
  default     = 30

  validation {
    condition     = var.expire_after_days >= 0 && var.expire_after_days <= 3650
    error_message = "expire_after_days must be between 0 and 3650."
  }
}

variable "kms_deletion_window_days" {
  type        = number
  description = "Waiting period before the customer-managed key is deleted."
  default     = 7

  validation {
    condition     = var.kms_deletion_window_days >= 7 && var.kms_deletion_window_days <= 30
    error_message = "kms_deletion_window_days must be between 7 and 30."
  }
}

variable "kms_admin_role_arns" {
  type        = list(string)
  description = "IAM roles that administer the key (besides the account root). Least privilege: keep it short."
  default     = []
}

variable "access_log_bucket" {
  type        = string
  description = "Bucket that receives S3 server access logs. Null: no access logging."
  default     = null
}

variable "force_destroy" {
  type        = bool
  description = "Let terraform destroy delete a bucket that still holds checkpoints (ephemeral runs)."
  default     = false
}

variable "replication" {
  type = object({
    destination_bucket_arn  = string
    destination_kms_key_arn = string
    storage_class           = optional(string, "STANDARD_IA")
  })
  description = "Optional cross-region replication of the checkpoints to an existing bucket encrypted with the given key. Null: none."
  default     = null

  validation {
    condition     = var.replication == null || can(regex("^arn:[a-z-]+:s3:::", var.replication.destination_bucket_arn))
    error_message = "replication.destination_bucket_arn must be an S3 bucket ARN."
  }
}

variable "tags" {
  type        = map(string)
  description = "Run tags (burst:run-id, burst:expires-at, burst:owner, burst:team, burst:cost-centre), merged into every resource."
  default     = {}
}
