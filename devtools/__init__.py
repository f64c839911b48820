"""Development tools: checks and builders that tests, `make` targets and maintainers run from a
checkout. Not part of the installed package (pyproject.toml installs burst, steps and
pipelines only), so nothing here can be imported by what ships.

    python -m devtools.hclcheck [PATH ...]       static HCL checks of terraform/ (python-hcl2)
    python -m devtools.schemacheck [PATH ...]    terraform/ against the providers' own schemas
    devtools.dockerfile_rules                    static checks of images/*/Dockerfile
    devtools.tinyimage                           a tiny reproducible OCI image (tests, demo layout)
"""
