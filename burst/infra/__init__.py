"""Infrastructure: the Terraform driver, provisioning with failover, teardown, leak scan, reaper."""
