"""Local execution of the burst pipeline on this machine."""
