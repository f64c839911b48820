################################################################################
# aws-checkpoint-bucket: where a run's checkpoints live. Customer-managed KMS key,
# versioning, public access blocked, TLS-only policy, lifecycle for old chunks,
# optional cross-region replication.
################################################################################

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  tags        = merge(var.tags, { "burst:run-id" = var.run_id })
  prefix      = coalesce(var.checkpoint_prefix, "runs/${var.run_id}/")
  account_arn = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"
}

################################################################################
# KMS key
################################################################################

data "aws_iam_policy_document" "kms" {
  #checkov:skip=CKV_AWS_111:a key policy's "*" resource means this key only; writes are limited to the account's principals
  #checkov:skip=CKV_AWS_356:a key policy's "*" resource means this key only, it cannot be narrowed further
  #checkov:skip=CKV_AWS_109:the account root must administer the key (AWS's default key policy) or the key becomes unmanageable
  statement {
    sid       = "AccountRootAdministers"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = concat([local.account_arn], var.kms_admin_role_arns)
    }
  }

  statement {
    sid       = "S3UsesKeyInThisRegion"
    actions   = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = [local.account_arn]
    }
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${data.aws_region.current.region}.amazonaws.com"]
    }
  }
}

resource "aws_kms_key" "this" {
  description             = "burst checkpoints of run ${var.run_id}"
  enable_key_rotation     = true
  deletion_window_in_days = var.kms_deletion_window_days
  policy                  = data.aws_iam_policy_document.kms.json
  tags                    = local.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/burst-${var.run_id}-checkpoints"
  target_key_id = aws_kms_key.this.key_id
}

################################################################################
# Bucket
################################################################################

resource "aws_s3_bucket" "this" {
  #checkov:skip=CKV2_AWS_62:checkpoints are read by the trainer that wrote them; no consumer subscribes to events
  #checkov:skip=CKV_AWS_144:cross-region replication is optional (var.replication); the planner decides whether a run needs it
  #checkov:skip=CKV_AWS_18:access logging is optional (var.access_log_bucket): an ephemeral run has no log bucket of its own
  bucket        = var.bucket_name
  bucket_prefix = var.bucket_name == null ? var.bucket_prefix : null
  force_destroy = var.force_destroy
  tags          = local.tags
}

resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket                  = aws_s3_bucket.this.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "this" {
  bucket = aws_s3_bucket.this.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  bucket = aws_s3_bucket.this.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.this.arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_logging" "this" {
  count         = var.access_log_bucket == null ? 0 : 1
  bucket        = aws_s3_bucket.this.id
  target_bucket = var.access_log_bucket
  target_prefix = "s3-access/${aws_s3_bucket.this.id}/"
}

################################################################################
# Lifecycle: old chunk versions and abandoned uploads go; the run's data expires
################################################################################

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    id     = "old-chunk-versions"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_days
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  rule {
    id     = "run-expiry"
    status = var.expire_after_days > 0 ? "Enabled" : "Disabled"
    filter {
      prefix = local.prefix
    }
    expiration {
      days = max(var.expire_after_days, 1)
    }
  }

  depends_on = [aws_s3_bucket_versioning.this]
}

################################################################################
# Policy: TLS only, KMS-encrypted writes only
################################################################################

data "aws_iam_policy_document" "bucket" {
  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.this.arn, "${aws_s3_bucket.this.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid       = "DenyOldTls"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.this.arn, "${aws_s3_bucket.this.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }

  statement {
    sid       = "DenyOtherEncryption"
    effect    = "Deny"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.this.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "StringNotEqualsIfExists"
      variable = "s3:x-amz-server-side-encryption"
      values   = ["aws:kms"]
    }
  }
}

resource "aws_s3_bucket_policy" "this" {
  bucket     = aws_s3_bucket.this.id
  policy     = data.aws_iam_policy_document.bucket.json
  depends_on = [aws_s3_bucket_public_access_block.this]
}

################################################################################
# Optional cross-region replication
################################################################################

data "aws_iam_policy_document" "replication_assume" {
  count = var.replication == null ? 0 : 1
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["s3.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "replication" {
  count = var.replication == null ? 0 : 1

  statement {
    actions   = ["s3:GetReplicationConfiguration", "s3:ListBucket"]
    resources = [aws_s3_bucket.this.arn]
  }
  statement {
    actions   = ["s3:GetObjectVersionForReplication", "s3:GetObjectVersionAcl", "s3:GetObjectVersionTagging"]
    resources = ["${aws_s3_bucket.this.arn}/${local.prefix}*"]
  }
  statement {
    actions   = ["s3:ReplicateObject", "s3:ReplicateDelete", "s3:ReplicateTags"]
    resources = ["${var.replication.destination_bucket_arn}/${local.prefix}*"]
  }
  statement {
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.this.arn]
  }
  statement {
    actions   = ["kms:Encrypt", "kms:GenerateDataKey"]
    resources = [var.replication.destination_kms_key_arn]
  }
}

resource "aws_iam_role" "replication" {
  count              = var.replication == null ? 0 : 1
  name_prefix        = "burst-repl-"
  assume_role_policy = data.aws_iam_policy_document.replication_assume[0].json
  tags               = local.tags
}

resource "aws_iam_role_policy" "replication" {
  count  = var.replication == null ? 0 : 1
  name   = "replicate-checkpoints"
  role   = aws_iam_role.replication[0].id
  policy = data.aws_iam_policy_document.replication[0].json
}

resource "aws_s3_bucket_replication_configuration" "this" {
  count  = var.replication == null ? 0 : 1
  bucket = aws_s3_bucket.this.id
  role   = aws_iam_role.replication[0].arn

  rule {
    id     = "checkpoints"
    status = "Enabled"
    filter {
      prefix = local.prefix
    }
    delete_marker_replication {
      status = "Enabled"
    }
    source_selection_criteria {
      sse_kms_encrypted_objects {
        status = "Enabled"
      }
    }
    destination {
      bucket        = var.replication.destination_bucket_arn
      storage_class = var.replication.storage_class
      encryption_configuration {
        replica_kms_key_id = var.replication.destination_kms_key_arn
      }
    }
  }

  depends_on = [aws_s3_bucket_versioning.this]
}
