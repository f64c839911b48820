################################################################################
# azure-run: the root module one run applies in Azure, in one region (the plan's
# candidate). The run's GPU VMs (a VM scale set: Spot with eviction policy Delete, or
# Regular; optional Regular floor) join the HOME EKS cluster as EKS Hybrid Nodes over the
# run's site-to-site VPN (docs/topology.md, decision A): module "home"
# (terraform/modules/aws-hybrid-join) makes the home side and the VMs' cloud-init. Also: a
# storage account with a customer-managed key and no public access (private endpoint
# only), a user-assigned identity for the train pods (federated with the home cluster's
# token issuer) allowed on the run's prefix only, and the nodes' network security group.
# State: azurerm backend, key from the run id.
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

  # every node of the run carries these labels and the run's taint (nvidia.com/gpu and
  # burst/run-id are added by the home module), so only this run's train pods land there.
  # The region too: a hybrid node has no cloud provider to label it, and without it the
  # Kueue flavors of one GPU and capacity on two sites cannot be told apart
  # (docs/reference/walk-kueue.md S9); NodeRestriction lets a kubelet set it on itself.
  node_labels = {
    "accelerator"                   = var.accelerator
    "burst/capacity"                = var.capacity
    "topology.kubernetes.io/region" = var.region
  }
  run_taint = "burst/run-id=${var.run_id}:NoSchedule"
  pools = { for k, v in {
    main  = { size = local.main_nodes, spot = local.spot }
    floor = { size = local.floor, spot = false }
  } : k => v if v.size > 0 }
  admin = "burstadmin"

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

# The home cluster's account and region (aws-hybrid-join is applied there)
provider "aws" {
  alias  = "home"
  region = var.home.region

  default_tags {
    tags = local.tags
  }
}

################################################################################
# The home side: the nodes' role, SSM activation, access entry, their cloud-init
################################################################################

module "home" {
  source                   = "../../modules/aws-hybrid-join"
  providers                = { aws = aws.home }
  run_id                   = var.run_id
  cluster_name             = var.home.cluster_name
  expires_at               = var.expires_at
  node_count               = var.node_count
  remote_node_cidrs        = var.node_cidrs
  remote_pod_cidrs         = var.pod_cidrs
  home_routing             = var.home.routing
  kubernetes_version       = var.home.kubernetes_version
  permissions_boundary_arn = var.home.permissions_boundary_arn
  node_labels              = local.node_labels
  node_taints              = [local.run_taint]
  tags                     = local.tags
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
  issuer              = module.home.oidc_issuer_url
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
# The nodes' network security group (docs/topology.md: inbound 10250 from the control
# plane's network, outbound 443 and 10250 to it; the run's nodes talk to each other)
################################################################################

resource "azurerm_network_security_group" "nodes" {
  name                = "${local.name}-nodes"
  resource_group_name = var.resource_group_name
  location            = var.region
  tags                = local.tags
}

resource "azurerm_network_security_rule" "kubelet_from_home" {
  name                        = "kubelet-from-home"
  resource_group_name         = var.resource_group_name
  network_security_group_name = azurerm_network_security_group.nodes.name
  description                 = "the home control plane to the kubelets (logs, exec)"
  priority                    = 100
  direction                   = "Inbound"
  access                      = "Allow"
  protocol                    = "Tcp"
  source_port_range           = "*"
  destination_port_range      = "10250"
  source_address_prefixes     = var.vpn.control_network_cidrs
  destination_address_prefix  = "*"
}

resource "azurerm_network_security_rule" "within_run" {
  name                        = "within-run"
  resource_group_name         = var.resource_group_name
  network_security_group_name = azurerm_network_security_group.nodes.name
  description                 = "node to node and pod to pod (CNI overlay, NCCL)"
  priority                    = 110
  direction                   = "Inbound"
  access                      = "Allow"
  protocol                    = "*"
  source_port_range           = "*"
  destination_port_range      = "*"
  source_address_prefixes     = concat(var.node_cidrs, var.pod_cidrs)
  destination_address_prefix  = "*"
}

resource "azurerm_network_security_rule" "deny_other_inbound" {
  name                        = "deny-other-inbound"
  resource_group_name         = var.resource_group_name
  network_security_group_name = azurerm_network_security_group.nodes.name
  description                 = "nothing else reaches the nodes (the default rules admit the whole virtual network and the VPN's address space)"
  priority                    = 4000
  direction                   = "Inbound"
  access                      = "Deny"
  protocol                    = "*"
  source_port_range           = "*"
  destination_port_range      = "*"
  source_address_prefix       = "*"
  destination_address_prefix  = "*"
}

resource "azurerm_network_security_rule" "to_home" {
  name                         = "to-home"
  resource_group_name          = var.resource_group_name
  network_security_group_name  = azurerm_network_security_group.nodes.name
  description                  = "kubelets to the home API server (443) and kubelet port"
  priority                     = 100
  direction                    = "Outbound"
  access                       = "Allow"
  protocol                     = "Tcp"
  source_port_range            = "*"
  destination_port_ranges      = ["443", "10250"]
  source_address_prefix        = "*"
  destination_address_prefixes = var.vpn.control_network_cidrs
}

################################################################################
# GPU nodes: the main scale set (Spot, eviction Delete, unless on_demand) and an optional
# Regular floor; no public address, host encryption, SSH by key only
################################################################################

resource "azurerm_linux_virtual_machine_scale_set" "gpu" {
  for_each                        = local.pools
  name                            = "${local.name}-${each.key}"
  resource_group_name             = var.resource_group_name
  location                        = var.region
  sku                             = var.vm_size
  instances                       = each.value.size
  zones                           = length(var.zones) > 0 ? [var.zones[0]] : null
  priority                        = each.value.spot ? "Spot" : "Regular"
  eviction_policy                 = each.value.spot ? "Delete" : null
  max_bid_price                   = each.value.spot ? -1 : null
  source_image_id                 = var.image_id
  custom_data                     = base64encode(module.home.user_data)
  admin_username                  = local.admin
  disable_password_authentication = true
  encryption_at_host_enabled      = true
  secure_boot_enabled             = true
  vtpm_enabled                    = true
  overprovision                   = false
  upgrade_mode                    = "Manual"
  extension_operations_enabled    = false
  provision_vm_agent              = true
  tags                            = local.tags

  admin_ssh_key {
    username   = local.admin
    public_key = var.admin_ssh_public_key
  }

  os_disk {
    caching                = "ReadWrite"
    storage_account_type   = "Premium_LRS"
    disk_size_gb           = var.boot_disk_gb
    disk_encryption_set_id = var.disk_encryption_set_id
  }

  network_interface {
    name                      = "nodes"
    primary                   = true
    network_security_group_id = azurerm_network_security_group.nodes.id

    ip_configuration {
      name      = "nodes"
      primary   = true
      subnet_id = var.node_subnet_id
    }
  }

  depends_on = [
    azurerm_virtual_network_gateway_connection.control,
    azurerm_network_security_rule.kubelet_from_home,
    azurerm_network_security_rule.to_home,
  ]
}
