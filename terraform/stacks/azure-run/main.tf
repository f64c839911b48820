################################################################################
# azure-run: the root module one run applies in Azure, in one region (the plan's
# candidate): an AKS node pool of GPU VMs (Spot with eviction policy Delete, or Regular;
# optional Regular floor), a storage account with a customer-managed key and no public
# access (private endpoint only), a user-assigned identity for the train pods (workload
# identity federation) allowed on the run's prefix only, and a site-to-site VPN
# connection back to the control network. State: azurerm backend, key from the run id.
################################################################################

locals {
  tags = merge(var.extra_tags, {
    "burst:run-id"      = var.run_id
    "burst:expires-at"  = var.expires_at
    "burst:owner"       = var.owner
    "burst:team"        = var.team
    "burst:cost-centre" = var.cost_centre
  })

  short           = substr(sha1(var.run_id), 0, 11)
  name            = "burst-${local.short}"
  spot            = var.capacity != "on_demand"
  floor           = var.capacity == "spot_with_floor" ? var.on_demand_floor : 0
  main_nodes      = var.node_count - local.floor
  service_account = "burst-${var.run_id}"
  container       = "checkpoints"
  prefix          = "runs/${var.run_id}/"

  node_labels = {
    "accelerator"    = var.accelerator
    "burst/run-id"   = var.run_id
    "burst/capacity" = var.capacity
  }
  gpu_taint = "nvidia.com/gpu=present:NoSchedule"
  # AKS requires this taint on Spot pools (and adds it itself)
  spot_taint = "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"

  # ABAC: the pod identity may read, write and delete blobs under the run's prefix only
  blob_actions = [
    "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/read",
    "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write",
    "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/delete",
    "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/add/action",
  ]
  prefix_condition = format(
    "((%s) OR (@Resource[Microsoft.Storage/storageAccounts/blobServices/containers/blobs:path] StringStartsWith '%s'))",
    join(" AND ", [for a in local.blob_actions : "!(ActionMatches{'${a}'})"]),
    local.prefix,
  )
}

provider "azurerm" {
  subscription_id     = var.subscription_id
  storage_use_azuread = true

  features {}
}

################################################################################
# Checkpoints: a storage account of the run, customer-managed key, no public access
################################################################################

resource "azurerm_user_assigned_identity" "storage" {
  name                = "${local.name}-storage"
  resource_group_name = var.resource_group_name
  location            = var.region
  tags                = local.tags
}

resource "azurerm_role_assignment" "storage_key" {
  scope                = var.key_vault_id
  role_definition_name = "Key Vault Crypto Service Encryption User"
  principal_id         = azurerm_user_assigned_identity.storage.principal_id
}

resource "azurerm_storage_account" "checkpoints" {
  #checkov:skip=CKV_AZURE_206:a run's checkpoints are replicated by burst's own replication, not GRS
  #checkov:skip=CKV2_AZURE_1:the customer-managed key is set in the customer_managed_key block
  #checkov:skip=CKV_AZURE_33:no queue service is used; blob access is logged by the site's diagnostic settings
  #checkov:skip=CKV2_AZURE_33:the private endpoint is azurerm_private_endpoint.blob
  name                              = replace(local.name, "-", "")
  resource_group_name               = var.resource_group_name
  location                          = var.region
  account_kind                      = "StorageV2"
  account_tier                      = "Standard"
  account_replication_type          = "ZRS"
  min_tls_version                   = "TLS1_2"
  https_traffic_only_enabled        = true
  public_network_access_enabled     = false
  allow_nested_items_to_be_public   = false
  shared_access_key_enabled         = false
  infrastructure_encryption_enabled = true
  default_to_oauth_authentication   = true
  tags                              = local.tags

  identity {
    type         = "UserAssigned"
    identity_ids = [azurerm_user_assigned_identity.storage.id]
  }

  customer_managed_key {
    key_vault_key_id          = var.key_vault_key_id
    user_assigned_identity_id = azurerm_user_assigned_identity.storage.id
  }

  network_rules {
    default_action             = "Deny"
    bypass                     = ["AzureServices"]
    virtual_network_subnet_ids = [var.node_subnet_id]
  }

  blob_properties {
    versioning_enabled = true

    delete_retention_policy {
      days = 7
    }
  }

  sas_policy {
    expiration_period = "00.01:00:00"
  }

  depends_on = [azurerm_role_assignment.storage_key]
}

resource "azurerm_private_endpoint" "blob" {
  name                = "${local.name}-blob"
  resource_group_name = var.resource_group_name
  location            = var.region
  subnet_id           = var.node_subnet_id
  tags                = local.tags

  private_service_connection {
    name                           = "${local.name}-blob"
    private_connection_resource_id = azurerm_storage_account.checkpoints.id
    subresource_names              = ["blob"]
    is_manual_connection           = false
  }
}

resource "azurerm_storage_container" "checkpoints" {
  #checkov:skip=CKV2_AZURE_21:blob read logging is the storage account's diagnostic setting, owned by the site
  name                  = local.container
  storage_account_name  = azurerm_storage_account.checkpoints.name
  container_access_type = "private"

  depends_on = [azurerm_private_endpoint.blob]
}

################################################################################
# Identity of the train pods: workload identity, least privilege on the run's prefix
################################################################################

resource "azurerm_user_assigned_identity" "pod" {
  name                = "${local.name}-pod"
  resource_group_name = var.resource_group_name
  location            = var.region
  tags                = local.tags
}

resource "azurerm_federated_identity_credential" "pod" {
  name                = "${local.name}-pod"
  resource_group_name = var.resource_group_name
  parent_id           = azurerm_user_assigned_identity.pod.id
  audience            = ["api://AzureADTokenExchange"]
  issuer              = var.oidc_issuer_url
  subject             = "system:serviceaccount:${var.namespace}:${local.service_account}"
}

resource "azurerm_role_assignment" "run_prefix" {
  scope                = "${azurerm_storage_account.checkpoints.id}/blobServices/default/containers/${azurerm_storage_container.checkpoints.name}"
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = azurerm_user_assigned_identity.pod.principal_id
  condition_version    = "2.0"
  condition            = local.prefix_condition
  description          = "burst run ${var.run_id}: blobs under its prefix only"
}

################################################################################
# Network back home: VPN gateway (the site's, or a new one) and the run's connection
################################################################################

resource "azurerm_public_ip" "vpn" {
  count               = var.vpn.gateway_id == null ? 1 : 0
  name                = "${local.name}-vpn"
  resource_group_name = var.resource_group_name
  location            = var.region
  allocation_method   = "Static"
  sku                 = "Standard"
  zones               = length(var.zones) > 0 ? var.zones : null
  tags                = local.tags
}

resource "azurerm_virtual_network_gateway" "vpn" {
  count               = var.vpn.gateway_id == null ? 1 : 0
  name                = "${local.name}-vpn"
  resource_group_name = var.resource_group_name
  location            = var.region
  type                = "Vpn"
  vpn_type            = "RouteBased"
  sku                 = length(var.zones) > 0 ? "VpnGw1AZ" : "VpnGw1"
  tags                = local.tags

  ip_configuration {
    name                 = "vpn"
    public_ip_address_id = azurerm_public_ip.vpn[0].id
    subnet_id            = var.vpn.gateway_subnet_id
  }
}

resource "azurerm_local_network_gateway" "control" {
  name                = "${local.name}-control"
  resource_group_name = var.resource_group_name
  location            = var.region
  gateway_address     = var.vpn.customer_gateway_ip
  address_space       = var.vpn.control_network_cidrs
  tags                = local.tags
}

resource "azurerm_virtual_network_gateway_connection" "control" {
  name                       = "${local.name}-control"
  resource_group_name        = var.resource_group_name
  location                   = var.region
  type                       = "IPsec"
  connection_protocol        = "IKEv2"
  virtual_network_gateway_id = coalesce(var.vpn.gateway_id, try(azurerm_virtual_network_gateway.vpn[0].id, null))
  local_network_gateway_id   = azurerm_local_network_gateway.control.id
  shared_key                 = var.vpn_shared_secret
  tags                       = local.tags
}

################################################################################
# GPU nodes: the main pool (Spot unless on_demand) and an optional Regular floor
################################################################################

resource "azurerm_kubernetes_cluster_node_pool" "gpu" {
  #checkov:skip=CKV_AZURE_168:max_pods is left to the cluster's network plugin for GPU pools
  name                    = "g${substr(local.short, 0, 11)}"
  kubernetes_cluster_id   = var.cluster_id
  vm_size                 = var.vm_size
  node_count              = local.main_nodes
  zones                   = length(var.zones) > 0 ? [var.zones[0]] : null
  vnet_subnet_id          = var.node_subnet_id
  priority                = local.spot ? "Spot" : "Regular"
  eviction_policy         = local.spot ? "Delete" : null
  spot_max_price          = local.spot ? -1 : null
  node_labels             = local.node_labels
  node_taints             = local.spot ? [local.gpu_taint, local.spot_taint] : [local.gpu_taint]
  host_encryption_enabled = true
  os_disk_type            = "Managed"
  tags                    = local.tags

  depends_on = [azurerm_virtual_network_gateway_connection.control]
}

resource "azurerm_kubernetes_cluster_node_pool" "floor" {
  #checkov:skip=CKV_AZURE_168:max_pods is left to the cluster's network plugin for GPU pools
  count                   = local.floor > 0 ? 1 : 0
  name                    = "r${substr(local.short, 0, 11)}"
  kubernetes_cluster_id   = var.cluster_id
  vm_size                 = var.vm_size
  node_count              = local.floor
  zones                   = length(var.zones) > 0 ? [var.zones[0]] : null
  vnet_subnet_id          = var.node_subnet_id
  priority                = "Regular"
  node_labels             = merge(local.node_labels, { "burst/capacity" = "on_demand" })
  node_taints             = [local.gpu_taint]
  host_encryption_enabled = true
  os_disk_type            = "Managed"
  tags                    = local.tags

  depends_on = [azurerm_virtual_network_gateway_connection.control]
}
