################################################################################
# aws-site-vpn: a site-to-site VPN from the run's VPC back to the control network,
# through a VPN gateway or an existing transit gateway, so training traffic and
# checkpoints never cross the public internet.
################################################################################

locals {
  tags    = merge(var.tags, { "burst:run-id" = var.run_id })
  use_vgw = var.transit_gateway_id == null
  routes = {
    for pair in setproduct(var.route_table_ids, var.control_network_cidrs) :
    "${pair[0]}|${pair[1]}" => { route_table_id = pair[0], cidr = pair[1] }
  }
}

################################################################################
# Gateways
################################################################################

resource "aws_customer_gateway" "this" {
  bgp_asn    = var.customer_gateway_bgp_asn
  ip_address = var.customer_gateway_ip
  type       = "ipsec.1"
  tags       = merge(local.tags, { Name = "burst-${var.run_id}-control" })
}

resource "aws_vpn_gateway" "this" {
  count           = local.use_vgw ? 1 : 0
  vpc_id          = var.vpc_id
  amazon_side_asn = var.amazon_side_asn
  tags            = merge(local.tags, { Name = "burst-${var.run_id}" })
}

################################################################################
# Tunnel logs
################################################################################

resource "aws_cloudwatch_log_group" "tunnels" {
  #checkov:skip=CKV_AWS_338:tunnel logs of an ephemeral run are kept for var.tunnel_log_retention_days (30 by default), not a year
  #checkov:skip=CKV_AWS_158:the KMS key is optional (var.log_kms_key_arn); CloudWatch Logs encrypts log data at rest either way
  name_prefix       = "/burst/${var.run_id}/vpn-"
  retention_in_days = var.tunnel_log_retention_days
  kms_key_id        = var.log_kms_key_arn
  tags              = local.tags
}

################################################################################
# Connection: IKEv2, strong ciphers only, both tunnels logged
################################################################################

resource "aws_vpn_connection" "this" {
  customer_gateway_id = aws_customer_gateway.this.id
  vpn_gateway_id      = local.use_vgw ? aws_vpn_gateway.this[0].id : null
  transit_gateway_id  = var.transit_gateway_id
  type                = "ipsec.1"
  static_routes_only  = var.static_routes_only

  tunnel1_ike_versions                 = ["ikev2"]
  tunnel1_phase1_encryption_algorithms = ["AES256", "AES256-GCM-16"]
  tunnel1_phase2_encryption_algorithms = ["AES256", "AES256-GCM-16"]
  tunnel1_phase1_integrity_algorithms  = ["SHA2-256", "SHA2-384", "SHA2-512"]
  tunnel1_phase2_integrity_algorithms  = ["SHA2-256", "SHA2-384", "SHA2-512"]
  tunnel1_phase1_dh_group_numbers      = [20, 21]
  tunnel1_phase2_dh_group_numbers      = [20, 21]
  tunnel2_ike_versions                 = ["ikev2"]
  tunnel2_phase1_encryption_algorithms = ["AES256", "AES256-GCM-16"]
  tunnel2_phase2_encryption_algorithms = ["AES256", "AES256-GCM-16"]
  tunnel2_phase1_integrity_algorithms  = ["SHA2-256", "SHA2-384", "SHA2-512"]
  tunnel2_phase2_integrity_algorithms  = ["SHA2-256", "SHA2-384", "SHA2-512"]
  tunnel2_phase1_dh_group_numbers      = [20, 21]
  tunnel2_phase2_dh_group_numbers      = [20, 21]

  tunnel1_log_options {
    cloudwatch_log_options {
      log_enabled       = true
      log_group_arn     = aws_cloudwatch_log_group.tunnels.arn
      log_output_format = "json"
    }
  }

  tunnel2_log_options {
    cloudwatch_log_options {
      log_enabled       = true
      log_group_arn     = aws_cloudwatch_log_group.tunnels.arn
      log_output_format = "json"
    }
  }

  tags = merge(local.tags, { Name = "burst-${var.run_id}" })
}

################################################################################
# Routes to the control network
################################################################################

resource "aws_vpn_connection_route" "control" {
  for_each               = local.use_vgw && var.static_routes_only ? toset(var.control_network_cidrs) : toset([])
  vpn_connection_id      = aws_vpn_connection.this.id
  destination_cidr_block = each.value
}

resource "aws_route" "control_via_vgw" {
  for_each               = local.use_vgw ? local.routes : {}
  route_table_id         = each.value.route_table_id
  destination_cidr_block = each.value.cidr
  gateway_id             = aws_vpn_gateway.this[0].id
}

resource "aws_route" "control_via_tgw" {
  for_each               = local.use_vgw ? {} : local.routes
  route_table_id         = each.value.route_table_id
  destination_cidr_block = each.value.cidr
  transit_gateway_id     = var.transit_gateway_id
}
