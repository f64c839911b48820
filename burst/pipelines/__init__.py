"""Argo Workflows definitions of burst, written with Hera.

``burst compile`` renders every manifest of :data:`pipelines.build.MANIFESTS` into
``burst/pipelines/compiled/<name>.yaml``; those files are committed goldens, and the local runner
(``burst.runner``) executes the very same ``burst-train.yaml`` that Argo runs.
"""
