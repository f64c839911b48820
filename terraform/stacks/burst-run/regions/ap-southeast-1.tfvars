# Variable set for ap-southeast-1, Asia Pacific (Singapore). Pass it with the candidate's site settings:
#   terraform -chdir=terraform/stacks/burst-run apply -var-file=regions/ap-southeast-1.tfvars -var-file=site.tfvars
# Instance types: most preferred first; burst's driver replaces them with the plan's
# candidate instance when the catalog names one. Check availability in the catalog
# (burst/plan/catalog/default.yaml): GPU offerings per region change often.
region         = "ap-southeast-1"
instance_types = ["p5.48xlarge", "p4d.24xlarge", "g6e.48xlarge"]
ami_type       = "AL2023_x86_64_NVIDIA"
