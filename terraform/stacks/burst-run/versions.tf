terraform {
  # use_lockfile (S3-native state locking) needs Terraform 1.10 or later.
  required_version = ">= 1.10.0, < 2.0.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
  }

  # Partial configuration: burst passes bucket, key (from the run id), region,
  # use_lockfile = true and encrypt = true at `terraform init -backend-config=...`.
  backend "s3" {}
}
