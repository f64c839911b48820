# terraform test: applies the local module for real (builtin provider only).

variables {
  run_id         = "tftest-run"
  region         = "region-under-test"
  cloud_provider = "aws"
  capacity       = "spot"
  gpu_type       = "h100"
  node_count     = 2
  tags = {
    "burst:run-id"     = "tftest-run"
    "burst:expires-at" = "2030-01-01T00:00:00Z"
  }
}

run "applies_vpn_node_group_and_nodes" {
  command = apply

  assert {
    condition     = length(output.node_names) == 2
    error_message = "expected two nodes"
  }

  assert {
    condition     = output.node_selector["burst/run-id"] == "tftest-run" && output.node_selector["accelerator"] == "h100"
    error_message = "node selector must carry the run id and the accelerator"
  }

  assert {
    condition     = output.tags["burst:run-id"] == "tftest-run" && output.tags["burst:expires-at"] == "2030-01-01T00:00:00Z"
    error_message = "run tags must be merged"
  }

  assert {
    condition     = length([for t in output.tolerations : t if t.key == "spot"]) == 1
    error_message = "spot capacity needs the spot toleration"
  }
}

run "on_demand_has_no_spot_toleration" {
  command = plan

  variables {
    capacity = "on_demand"
  }

  assert {
    condition     = length([for t in output.tolerations : t if t.key == "spot"]) == 0
    error_message = "on-demand nodes are not tainted spot"
  }
}

run "no_capacity_fails_at_apply_time" {
  command   = apply
  state_key = "no_capacity" # a fresh state: the node group is created, then fails

  variables {
    run_id               = "tftest-nocap"
    simulate_no_capacity = ["region-under-test"]
  }

  expect_failures = [terraform_data.node_group]
}

run "bad_capacity_is_rejected" {
  command = plan

  variables {
    capacity = "cheap"
  }

  expect_failures = [var.capacity]
}
