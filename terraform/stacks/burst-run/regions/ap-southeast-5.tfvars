# Variable set for ap-southeast-5, Asia Pacific (Malaysia). Pass it with the candidate's site settings:
#   terraform -chdir=terraform/stacks/burst-run apply -var-file=regions/ap-southeast-5.tfvars -var-file=site.tfvars
# Instance types: most preferred first; burst's driver replaces them with the plan's
# candidate instance when the catalog names one. Check availability in the catalog
# (burst/plan/catalog/default.yaml): GPU offerings per region change often.
region         = "ap-southeast-5"
instance_types = ["g6.48xlarge", "g5.48xlarge"]
ami_type       = "AL2023_x86_64_NVIDIA"
