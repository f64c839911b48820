terraform {
  required_version = ">= 1.6.0, < 2.0.0"
  # Only the builtin provider (terraform_data): nothing to download, runs anywhere.
}
