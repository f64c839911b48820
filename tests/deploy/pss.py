"""Pod Security Standards, profile ``restricted`` (version ``latest``, Kubernetes 1.33), as the
Pod Security admission controller evaluates a pod: every control of the published standard
(https://kubernetes.io/docs/concepts/security/pod-security-standards/), each written after its
check in kubernetes/pod-security-admission ``policy/check_*.go``. Init and ephemeral containers
count like the others. A pod that breaks one control is refused whole (the namespace label
``pod-security.kubernetes.io/enforce: restricted``, deploy/namespace.yaml).
"""

from __future__ import annotations

from typing import Any

#: check_restrictedVolumes.go
ALLOWED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
#: check_sysctls.go (safe sysctls, 1.33)
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
}  # fmt: skip


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]


def violations(spec: dict[str, Any]) -> list[str]:
    """Every control of ``restricted`` the pod spec breaks, one line each."""
    pod = spec.get("securityContext") or {}
    out: list[str] = []
    # baseline: host namespaces, host ports, hostPath, privileged, capabilities, procMount,
    # sysctls, AppArmor, SELinux, Windows host process (check_hostNamespaces.go, ...)
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"{key} is true")
    for sysctl in pod.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctl {sysctl.get('name')} is not safe")
    # restricted: volume types (check_restrictedVolumes.go)
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(
                f"volume {v.get('name')}: type {sorted(kinds - ALLOWED_VOLUMES)} not allowed"
            )
    # runAsNonRoot (check_runAsNonRoot.go): the pod sets true and no container false, or
    # every container sets true
    pod_non_root = pod.get("runAsNonRoot") is True
    # runAsUser (check_runAsUser.go): never 0
    if pod.get("runAsUser") == 0:
        out.append("pod runAsUser is 0")
    # seccomp (check_seccompProfile_restricted.go): RuntimeDefault or Localhost on the pod, or
    # on every container; never Unconfined
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    if pod_seccomp == "Unconfined":
        out.append("pod seccompProfile is Unconfined")
    for c in _containers(spec):
        name = c.get("name", "?")
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"container {name}: privileged")
        # allowPrivilegeEscalation must be false (check_allowPrivilegeEscalation.go)
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"container {name}: allowPrivilegeEscalation is not false")
        # capabilities: drop ALL, add nothing but NET_BIND_SERVICE
        # (check_capabilities_restricted.go)
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"container {name}: capabilities do not drop ALL")
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            out.append(f"container {name}: adds capabilities {sorted(extra)}")
        if sc.get("runAsNonRoot") is False or not (pod_non_root or sc.get("runAsNonRoot")):
            out.append(f"container {name}: runAsNonRoot is not true (pod or container)")
        if sc.get("runAsUser") == 0:
            out.append(f"container {name}: runAsUser is 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp == "Unconfined" or not (
            seccomp in ("RuntimeDefault", "Localhost")
            or (seccomp is None and pod_seccomp in ("RuntimeDefault", "Localhost"))
        ):
            out.append(f"container {name}: seccompProfile is not RuntimeDefault or Localhost")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"container {name}: procMount {sc.get('procMount')}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"container {name}: hostPort {port['hostPort']}")
        se = sc.get("seLinuxOptions") or {}
        if se.get("user") or se.get("role"):
            out.append(f"container {name}: seLinuxOptions user/role set")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"container {name}: windows hostProcess")
    return out
