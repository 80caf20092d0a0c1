"""The suites' pods under Kubernetes Pod Security Admission.

Many clusters enforce the ``restricted`` Pod Security Standard on the namespaces users run in
(label ``pod-security.kubernetes.io/enforce: restricted``): the API server refuses a pod that
does not run as a non-root user, with ``allowPrivilegeEscalation: false``, every capability
dropped and the runtime's default seccomp profile. The Job controller's create then fails, the
Job shows only ``FailedCreate`` events, and a launcher that waits for a pod waits for nothing.

So every suite pod (Job, JobSet node, load Job, layer Job) is made to satisfy ``restricted``
by default (launcher setting ``pod_security``):

- pod: ``runAsNonRoot``, ``runAsUser``/``runAsGroup``/``fsGroup`` = ``run_as_user`` (10001,
  the benchrun image's user and the deployment's, so a pod writes the run volume its
  orchestrator made), ``seccompProfile: RuntimeDefault``;
- container: ``allowPrivilegeEscalation: false``, ``capabilities.drop: [ALL]``;
- ``HOME=/tmp``: an image's other user has no home this uid can write (its HOME is ``/``, or
  root's), and compilers' caches (Triton, inductor) write under it.

A suite on RDMA adds ``IPC_LOCK`` (to pin memory for the NIC) and runs as its image's user: a
capability in ``capabilities.add`` reaches a non-root process's effective set only as an ambient
capability, which Kubernetes never sets, so under the restricted context it would be granted and
not held. No Pod Security level but ``privileged`` allows either, so its namespace must not
enforce ``baseline`` or ``restricted``; the launcher says so when the API server refuses the pod
(``refusal_reason``).
``pod_security: none`` leaves the pod's security context to the image (an image that must run
as root, on a cluster that enforces nothing).
"""

from __future__ import annotations

from typing import Any

RESTRICTED = "restricted"
NONE = "none"
LEVELS = (RESTRICTED, NONE)
DEFAULT_RUN_AS_USER = 10001
POD_HOME = "/tmp"


def apply(pod_spec: dict[str, Any], level: str, run_as_user: int) -> None:
    """Give ``pod_spec`` (a V1PodSpec-shaped dict) and its containers the security context of
    ``level``; capabilities a container already adds (RDMA's IPC_LOCK) stay."""
    if level == NONE:
        return
    if level != RESTRICTED:
        raise ValueError(f"pod_security: {level!r} is not one of {', '.join(LEVELS)}")
    pod_spec["securityContext"] = {
        **(pod_spec.get("securityContext") or {}),
        "runAsNonRoot": True,
        "runAsUser": run_as_user,
        "runAsGroup": run_as_user,
        "fsGroup": run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for container in pod_spec.get("containers") or []:
        ctx = container.setdefault("securityContext", {})
        ctx["allowPrivilegeEscalation"] = False
        caps = ctx.setdefault("capabilities", {})
        caps["drop"] = ["ALL"]
        env = container.setdefault("env", [])
        if not any(e.get("name") == "HOME" for e in env):
            env.append({"name": "HOME", "value": POD_HOME})


def refusal_reason(message: str) -> str | None:
    """The replicate's reason when the API server refused its pod for good (a ``FailedCreate``
    event whose message says the pod violates the namespace's Pod Security level: the same pod
    is refused at every retry), with what to change; None for a refusal that may pass (a
    ResourceQuota, a webhook's outage), which the pending timeout's note names instead."""
    text = " ".join(message.split())
    if "violates PodSecurity" not in text:
        return None
    return ("pod refused by Pod Security admission (the namespace enforces a level this pod does not meet: a suite on "
            "RDMA adds IPC_LOCK, which only a namespace at pod-security.kubernetes.io/enforce=privileged allows; "
            "otherwise set the launcher's pod_security to restricted, BENCHRUN_LAUNCHER_POD_SECURITY): " + text)
