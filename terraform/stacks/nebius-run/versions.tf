terraform {
  required_version = ">= 1.10.0, < 2.0.0"

  required_providers {
    # Public provider: registry.terraform.io/providers/nebius/nebius (source
    # github.com/nebius/terraform-provider-nebius; 0.6.42 published 2026-08-13). It has no
    # CDK binding on npm, so burst/infra/schemacheck.py cannot check this stack: fmt,
    # hclcheck, checkov and a hand check against the provider's generated docs
    # (docs/terraform.md). 0.6.3 (2026-04-21) is the first release whose compute instance
    # takes boot_disk.managed_disk (the disk is deleted with the instance).
    nebius = {
      source  = "nebius/nebius"
      version = ">= 0.6.3, < 0.7.0"
    }
    # the home side (aws-hybrid-join, module "home"), in the home cluster's region
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
  }

  # Partial configuration: Nebius Object Storage is S3-compatible; burst passes bucket,
  # key (from the run id), region, endpoints.s3 = https://storage.<region>.nebius.cloud,
  # use_lockfile = true and the skip_* flags at `terraform init -backend-config=...`.
  backend "s3" {}
}
