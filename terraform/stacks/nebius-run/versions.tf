terraform {
  required_version = ">= 1.10.0, < 2.0.0"

  required_providers {
    # Public provider: registry.terraform.io/providers/nebius/nebius (source
    # github.com/nebius/terraform-provider-nebius; 0.6.42 published 2026-08-13). It has no
    # CDK binding on npm, so burst/infra/schemacheck.py cannot check this stack: fmt,
    # hclcheck and checkov only (docs/terraform.md).
    nebius = {
      source  = "nebius/nebius"
      version = "~> 0.6"
    }
  }

  # Partial configuration: Nebius Object Storage is S3-compatible; burst passes bucket,
  # key (from the run id), region, endpoints.s3 = https://storage.<region>.nebius.cloud,
  # use_lockfile = true and the skip_* flags at `terraform init -backend-config=...`.
  backend "s3" {}
}
