terraform {
  required_version = ">= 1.10.0, < 2.0.0"

  required_providers {
    # 6.1.0 and 6.50.0 are the lowest and newest versions with published schema bindings
    # (burst/infra/schemacheck.py checks this stack against both).
    google = {
      source  = "hashicorp/google"
      version = ">= 6.1.0, < 7.0.0"
    }
    # the home side (aws-hybrid-join, module "home"), in the home cluster's region
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
  }

  # Partial configuration: burst passes bucket and prefix (from the run id) at
  # `terraform init -backend-config=...`. GCS state is locked natively.
  backend "gcs" {}
}
