output "bucket_name" {
  description = "Name of the checkpoint bucket."
  value       = try(aws_s3_bucket.this.id, null)
}

output "bucket_arn" {
  description = "ARN of the checkpoint bucket."
  value       = try(aws_s3_bucket.this.arn, null)
}

output "checkpoint_prefix" {
  description = "Key prefix of the run's checkpoints (ends with '/')."
  value       = local.prefix
}

output "checkpoint_uri" {
  description = "s3:// URI of the run's checkpoints, for the job spec's storage.checkpoint_uri."
  value       = try("s3://${aws_s3_bucket.this.id}/${local.prefix}", null)
}

output "kms_key_arn" {
  description = "ARN of the customer-managed key that encrypts the checkpoints."
  value       = try(aws_kms_key.this.arn, null)
}

output "replication_role_arn" {
  description = "ARN of the replication role, or null without replication."
  value       = try(aws_iam_role.replication[0].arn, null)
}
