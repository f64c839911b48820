# Variable set for me-south-1, Middle East (Bahrain). Pass it with the candidate's site settings:
#   terraform -chdir=terraform/stacks/burst-run apply -var-file=regions/me-south-1.tfvars -var-file=site.tfvars
# Instance types: most preferred first; burst's driver replaces them with the plan's
# candidate instance when the catalog names one. Check availability in the catalog
# (burst/plan/catalog/default.yaml): GPU offerings per region change often.
region         = "me-south-1"
instance_types = ["g5.48xlarge", "g4dn.12xlarge"]
ami_type       = "AL2023_x86_64_NVIDIA"
