output "vpn_connection_id" {
  description = "ID of the site-to-site VPN connection."
  value       = try(aws_vpn_connection.this.id, null)
}

output "tunnel_status" {
  description = "Status (UP or DOWN) of each tunnel, as AWS last reported it."
  value       = try(aws_vpn_connection.this.vgw_telemetry[*].status, [])
}

output "vpn_gateway_id" {
  description = "ID of the VPN gateway, or null when attached to a transit gateway."
  value       = try(aws_vpn_gateway.this[0].id, null)
}

output "customer_gateway_id" {
  description = "ID of the customer gateway (the control network's side)."
  value       = try(aws_customer_gateway.this.id, null)
}

output "tunnel_addresses" {
  description = "Outside addresses of the two tunnels, to configure on the control network's device."
  value       = try([aws_vpn_connection.this.tunnel1_address, aws_vpn_connection.this.tunnel2_address], [])
}
