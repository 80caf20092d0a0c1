"""Pod Security Admission as the API server enforces it (the Pod Security Standards, policy
version ``latest``, Kubernetes 1.31): a namespace labelled
``pod-security.kubernetes.io/enforce: baseline|restricted`` refuses a pod that breaks a check of
its level, with the API server's message; a Job's pods are then never made (the Job controller's
create fails: a ``FailedCreate`` event on the Job, retried with back-off).

Written from the standard (kubernetes.io/docs/concepts/security/pod-security-standards and
k8s.io/pod-security-admission/policy), not from benchrun's pods. Checks kept: host namespaces,
privileged, capabilities, hostPath volumes, host ports, seccomp, procMount and sysctls for
``baseline``; volume types, privilege escalation, running as non-root, runAsUser=0, seccomp
and capabilities for ``restricted``. Not modelled: AppArmor, SELinux and Windows options.
"""

from __future__ import annotations

from typing import Any

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or [])]


def _ctx(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("securityContext") or {}


def _names(items: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in items)


def _baseline(spec: dict[str, Any]) -> list[str]:
    out: list[str] = []
    pod_ctx = _ctx(spec)
    hosts = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        out.append(f"host namespaces ({', '.join(hosts)})")
    priv = [c["name"] for c in _containers(spec) if _ctx(c).get("privileged")]
    if priv:
        out.append(f"privileged (container{'s' if len(priv) > 1 else ''} {_names(priv)} must not set "
                   "securityContext.privileged=true)")
    added = []
    for c in _containers(spec):
        bad = [cap for cap in ((_ctx(c).get("capabilities") or {}).get("add") or []) if cap not in BASELINE_CAPABILITIES]
        if bad:
            added.append(f'container "{c["name"]}" must not include {_names(bad)} in securityContext.capabilities.add')
    if added:
        out.append(f"non-default capabilities ({'; '.join(added)})")
    host_paths = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        out.append(f"hostPath volumes (volume{'s' if len(host_paths) > 1 else ''} {_names(host_paths)})")
    ports = [f'container "{c["name"]}" uses hostPort {p["hostPort"]}' for c in _containers(spec)
             for p in c.get("ports") or [] if p.get("hostPort")]
    if ports:
        out.append(f"hostPort ({'; '.join(ports)})")
    unconfined = ["pod"] if (pod_ctx.get("seccompProfile") or {}).get("type") == "Unconfined" else []
    unconfined += [f'container "{c["name"]}"' for c in _containers(spec)
                   if (_ctx(c).get("seccompProfile") or {}).get("type") == "Unconfined"]
    if unconfined:
        out.append(f'seccompProfile ({" and ".join(unconfined)} must not set securityContext.seccompProfile.type '
                   'to "Unconfined")')
    proc = [c["name"] for c in _containers(spec) if _ctx(c).get("procMount") not in (None, "Default")]
    if proc:
        out.append(f"procMount (containers {_names(proc)} must not set securityContext.procMount)")
    sysctls = [s["name"] for s in pod_ctx.get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    if sysctls:
        out.append(f"forbidden sysctls ({', '.join(sysctls)})")
    return out


def _restricted(spec: dict[str, Any]) -> list[str]:
    out: list[str] = []
    pod_ctx = _ctx(spec)
    vols = [(v["name"], next((k for k in v if k != "name"), "")) for v in spec.get("volumes") or []]
    bad_vols = [(n, t) for n, t in vols if t not in RESTRICTED_VOLUMES]
    if bad_vols:
        out.append("restricted volume types (" + ", ".join(f'volume "{n}" uses restricted volume type "{t}"'
                                                         for n, t in bad_vols) + ")")
    escal = [c["name"] for c in _containers(spec) if _ctx(c).get("allowPrivilegeEscalation") is not False]
    if escal:
        out.append(f"allowPrivilegeEscalation != false (container{'s' if len(escal) > 1 else ''} {_names(escal)} "
                   "must set securityContext.allowPrivilegeEscalation=false)")
    caps = []
    for c in _containers(spec):
        cap = _ctx(c).get("capabilities") or {}
        if "ALL" not in (cap.get("drop") or []):
            caps.append(f'container "{c["name"]}" must set securityContext.capabilities.drop=["ALL"]')
        extra = [a for a in cap.get("add") or [] if a != "NET_BIND_SERVICE"]
        if extra:
            caps.append(f'container "{c["name"]}" must not include {_names(extra)} in securityContext.capabilities.add')
    if caps:
        out.append(f"unrestricted capabilities ({'; '.join(caps)})")
    pod_nonroot = pod_ctx.get("runAsNonRoot")
    nonroot = [c["name"] for c in _containers(spec)
               if _ctx(c).get("runAsNonRoot") is False or (_ctx(c).get("runAsNonRoot") is None and pod_nonroot is not True)]
    if pod_nonroot is False or nonroot:
        out.append("runAsNonRoot != true (pod or container" + ("s " if len(nonroot) > 1 else " ")
                   + _names(nonroot) + " must set securityContext.runAsNonRoot=true)")
    zero = (["pod"] if pod_ctx.get("runAsUser") == 0 else []) + [
        f'container "{c["name"]}"' for c in _containers(spec) if _ctx(c).get("runAsUser") == 0]
    if zero:
        out.append(f"runAsUser=0 ({' and '.join(zero)} must not set runAsUser=0)")
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    seccomp = [c["name"] for c in _containers(spec)
               if ((_ctx(c).get("seccompProfile") or {}).get("type") or pod_seccomp) not in ("RuntimeDefault", "Localhost")]
    if seccomp:
        out.append("seccompProfile (pod or container" + ("s " if len(seccomp) > 1 else " ") + _names(seccomp)
                   + ' must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')
    return out


def violations(spec: dict[str, Any], level: str) -> list[str]:
    """What a pod spec breaks at ``level`` (empty: allowed)."""
    if level not in LEVELS:
        raise ValueError(f"pod security level {level!r}: one of {LEVELS}")
    if level == "privileged":
        return []
    found = _baseline(spec)
    if level == "restricted":
        # restricted repeats baseline's checks; its own capability rule replaces baseline's
        found = [v for v in found if not v.startswith("non-default capabilities")] + _restricted(spec)
    return found


def forbidden_message(pod_name: str, spec: dict[str, Any], level: str) -> str | None:
    """The API server's refusal of a pod in a namespace that enforces ``level``, or None."""
    found = violations(spec, level)
    if not found:
        return None
    return f'pods "{pod_name}" is forbidden: violates PodSecurity "{level}:latest": {", ".join(found)}'
