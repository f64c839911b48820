################################################################################
# aws-run-iam: least privilege for one run. The pods' role (IRSA) may read and write
# the run's prefix in the checkpoint bucket with its key, and nothing else (on an on-demand
# fallback that probes spot, also read EC2's spot placement scores).
################################################################################

data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  tags            = merge(var.tags, { "burst:run-id" = var.run_id })
  service_account = coalesce(var.service_account, "burst-${var.run_id}")
  oidc_host       = trimprefix(var.oidc_provider_url, "https://")
  policy_arn      = "arn:${data.aws_partition.current.partition}:iam::aws:policy"
  # burst.lease.heartbeat_store: burst/runs/<run id>/heartbeat/<role>.json
  heartbeat_prefix = "burst/runs/${var.run_id}/heartbeat/"
}

################################################################################
# Pod role (IRSA)
################################################################################

data "aws_iam_policy_document" "pod_assume" {
  statement {
    actions = ["sts:AssumeRoleWithWebIdentity"]
    principals {
      type        = "Federated"
      identifiers = [var.oidc_provider_arn]
    }
    condition {
      test     = "StringEquals"
      variable = "${local.oidc_host}:sub"
      values   = ["system:serviceaccount:${var.namespace}:${local.service_account}"]
    }
    condition {
      test     = "StringEquals"
      variable = "${local.oidc_host}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "pod" {
  statement {
    sid       = "ListRunPrefix"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [var.checkpoint_prefix, "${var.checkpoint_prefix}*"]
    }
  }

  statement {
    sid = "ReadWriteRunPrefix"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
    ]
    resources = ["${var.bucket_arn}/${var.checkpoint_prefix}*"]
  }

  # The train pods renew the run's heartbeat next to its Terraform state, where the reaper
  # reads it (burst.lease.heartbeat_store): without this the heartbeat is never written, and
  # the reaper judges the run by its expiry alone. Reading a missing key without ListBucket is
  # a 403, not a 404 (S3), so the lease's first read needs the listing too.
  dynamic "statement" {
    for_each = var.state_bucket_arn == null ? [] : [1]
    content {
      sid       = "ListRunHeartbeat"
      actions   = ["s3:ListBucket"]
      resources = [var.state_bucket_arn]
      condition {
        test     = "StringLike"
        variable = "s3:prefix"
        values   = ["${local.heartbeat_prefix}", "${local.heartbeat_prefix}*"]
      }
    }
  }

  dynamic "statement" {
    for_each = var.state_bucket_arn == null ? [] : [1]
    content {
      sid       = "RenewRunHeartbeat"
      actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
      resources = ["${var.state_bucket_arn}/${local.heartbeat_prefix}*"]
    }
  }

  # The run's own checkpoint store: the spec's storage.checkpoint_uri under the run id, where
  # train writes its checkpoints and lease (burst/train/checkpoints.py RunCheckpoints: the
  # spec's store, not the stack's bucket, so a requeue to another region resumes from it).
  dynamic "statement" {
    for_each = var.run_store_bucket_arn == null ? [] : [1]
    content {
      sid       = "ListRunStore"
      actions   = ["s3:ListBucket"]
      resources = [var.run_store_bucket_arn]
      condition {
        test     = "StringLike"
        variable = "s3:prefix"
        values   = [var.run_store_prefix, "${var.run_store_prefix}*"]
      }
    }
  }

  dynamic "statement" {
    for_each = var.run_store_bucket_arn == null ? [] : [1]
    content {
      sid = "ReadWriteRunStore"
      actions = [
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
      ]
      resources = ["${var.run_store_bucket_arn}/${var.run_store_prefix}*"]
    }
  }

  # A regional-sync run: every region's worker and the aggregator write and read the run's
  # exchange store (the spec's storage.checkpoint_uri under <workflow>/exchange/, in the
  # aggregation region: burst/steps/regional_provision.py), which is no region's own bucket.
  dynamic "statement" {
    for_each = var.exchange_bucket_arn == null ? [] : [1]
    content {
      sid       = "ListRunExchange"
      actions   = ["s3:ListBucket"]
      resources = [var.exchange_bucket_arn]
      condition {
        test     = "StringLike"
        variable = "s3:prefix"
        values   = [var.exchange_prefix, "${var.exchange_prefix}*"]
      }
    }
  }

  dynamic "statement" {
    for_each = var.exchange_bucket_arn == null ? [] : [1]
    content {
      sid = "ReadWriteRunExchange"
      actions = [
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
      ]
      resources = ["${var.exchange_bucket_arn}/${var.exchange_prefix}*"]
    }
  }

  dynamic "statement" {
    for_each = var.store_kms_key_arn == null ? [] : [1]
    content {
      sid       = "UseSpecStoreKeyThroughS3"
      actions   = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"]
      resources = [var.store_kms_key_arn]
    }
  }

  # An on-demand fallback probes spot (burst.train.spot_probe, the spec's
  # compute.recovery.probe_interval_s): EC2's spot placement scores. Only on such a placement,
  # and only this read-only action; it has no resource-level permissions, hence "*".
  dynamic "statement" {
    for_each = var.spot_probe ? [1] : []
    content {
      sid       = "ProbeSpotPlacementScores"
      actions   = ["ec2:GetSpotPlacementScores"]
      resources = ["*"]
    }
  }

  statement {
    sid       = "UseRunKeyThroughS3"
    actions   = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${data.aws_region.current.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "pod" {
  name_prefix          = "burst-pod-"
  description          = "burst run ${var.run_id}: pods of the run (IRSA)"
  assume_role_policy   = data.aws_iam_policy_document.pod_assume.json
  permissions_boundary = var.permissions_boundary_arn
  max_session_duration = 3600
  tags                 = local.tags
}

resource "aws_iam_role_policy" "pod" {
  name   = "checkpoints-of-run"
  role   = aws_iam_role.pod.id
  policy = data.aws_iam_policy_document.pod.json
}

################################################################################
# Node role (EC2 instances of the run's node group)
################################################################################

data "aws_iam_policy_document" "node_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "node" {
  count                = var.create_node_role ? 1 : 0
  name_prefix          = "burst-node-"
  description          = "burst run ${var.run_id}: EC2 nodes of the GPU node group"
  assume_role_policy   = data.aws_iam_policy_document.node_assume.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = local.tags
}

resource "aws_iam_role_policy_attachment" "node" {
  for_each = var.create_node_role ? toset([
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
  ]) : toset([])
  role       = aws_iam_role.node[0].name
  policy_arn = "${local.policy_arn}/${each.value}"
}
