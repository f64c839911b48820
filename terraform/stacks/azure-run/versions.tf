terraform {
  required_version = ">= 1.10.0, < 2.0.0"

  required_providers {
    # 4.0.1 and 4.73.0 are the lowest and newest versions with published schema bindings
    # (burst/infra/schemacheck.py checks this stack against both).
    azurerm = {
      source  = "hashicorp/azurerm"
      version = ">= 4.0.1, < 5.0.0"
    }
  }

  # Partial configuration: burst passes storage_account_name, container_name, key (from
  # the run id) and use_azuread_auth = true at `terraform init -backend-config=...`.
  # Blob leases lock the state.
  backend "azurerm" {}
}
