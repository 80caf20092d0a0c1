"""RBAC for the harness: who made each API call, what it asked for, and whether Roles allow it.

Every request the harness API server receives becomes a :class:`Call` (the user from its
bearer token, the RBAC verb, API group, resource, subresource, namespace and name), as the
API server's authorizer sees it. :class:`Policy` is the RBAC authorizer over
Role/ClusterRole/RoleBinding/ClusterRoleBinding documents (``deploy/``'s, rendered), with
Kubernetes' rules: a RoleBinding grants in its own namespace (a ClusterRole bound by a
RoleBinding too), a ClusterRoleBinding everywhere; ``resources`` match ``resource`` or
``resource/subresource`` (``*`` and ``*/sub`` included); ``resourceNames`` restrict by name;
aggregation labels are not followed (no role of ours relies on them).

Tokens: a service account's kubeconfig (``Cluster.kubeconfig_for``) carries the token
``sa:<namespace>:<name>``, which the server reads as ``system:serviceaccount:<ns>:<name>``;
the harness's own token (the default kubeconfig, the test) is an administrator.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

ADMIN = "kharness-admin"
SA_TOKEN_PREFIX = "sa:"


def sa_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def sa_token(namespace: str, name: str) -> str:
    return f"{SA_TOKEN_PREFIX}{namespace}:{name}"


def user_of_token(header: str | None) -> str:
    token = (header or "").removeprefix("Bearer ").strip()
    if token.startswith(SA_TOKEN_PREFIX):
        ns, _, name = token[len(SA_TOKEN_PREFIX):].partition(":")
        return sa_user(ns, name)
    return ADMIN


@dataclass(frozen=True)
class Call:
    """One API request as RBAC sees it."""

    user: str
    verb: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None = None

    @property
    def what(self) -> str:
        res = self.resource + (f"/{self.subresource}" if self.subresource else "")
        return f"{self.verb} {res}" + (f".{self.group}" if self.group else "") + (
            f" in {self.namespace}" if self.namespace else " (cluster-wide)")

    def forbidden_message(self) -> str:
        """The API server's 403 message, word for word."""
        res = self.resource + (f"/{self.subresource}" if self.subresource else "")
        kind = f"{self.resource}.{self.group}" if self.group else self.resource
        head = (f'{kind} "{self.name}"' if self.name else kind) + " is forbidden"
        where = f' in the namespace "{self.namespace}"' if self.namespace else " at the cluster scope"
        return (f'{head}: User "{self.user}" cannot {self.verb} resource "{res}" in API group '
                f'"{self.group}"{where}')


def verb_of(method: str, name: str | None, params: dict[str, str]) -> str:
    """The RBAC verb of an HTTP request (GET → get/list/watch, DELETE on a collection → deletecollection)."""
    method = method.upper()
    if method == "GET":
        if str(params.get("watch", "")).lower() in ("true", "1"):
            return "watch"
        return "get" if name else "list"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def _matches(values: Iterable[str], value: str) -> bool:
    values = list(values or [])
    return "*" in values or value in values


def _resource_matches(rule_resources: Iterable[str], resource: str, subresource: str | None) -> bool:
    want = resource + (f"/{subresource}" if subresource else "")
    for r in rule_resources or []:
        if r == "*" or r == want:
            return True
        if subresource and r == f"*/{subresource}":
            return True
    return False


class Policy:
    """An RBAC authorizer over rendered Role/ClusterRole/(Cluster)RoleBinding documents."""

    def __init__(self, docs: Iterable[dict[str, Any]]) -> None:
        docs = [d for d in docs if d]
        self.roles = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs if d.get("kind") == "Role"}
        self.cluster_roles = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ClusterRole"}
        self.bindings = [d for d in docs if d.get("kind") in ("RoleBinding", "ClusterRoleBinding")]

    def _subject_matches(self, subject: dict[str, Any], user: str) -> bool:
        if subject.get("kind") == "ServiceAccount":
            return user == sa_user(subject.get("namespace", ""), subject["name"])
        if subject.get("kind") == "User":
            return user == subject["name"]
        if subject.get("kind") == "Group":
            group = subject["name"]
            if group == "system:serviceaccounts":
                return user.startswith("system:serviceaccount:")
            if group.startswith("system:serviceaccounts:"):
                return user.startswith("system:serviceaccount:" + group.removeprefix("system:serviceaccounts:") + ":")
        return False

    def rules_for(self, call: Call) -> list[dict[str, Any]]:
        """Every rule that applies to the call's user where the call is made."""
        out: list[dict[str, Any]] = []
        for b in self.bindings:
            if not any(self._subject_matches(s, call.user) for s in b.get("subjects") or []):
                continue
            ref = b["roleRef"]
            if b["kind"] == "RoleBinding":
                if call.namespace != b["metadata"].get("namespace"):
                    continue  # a RoleBinding grants nothing cluster-wide or in another namespace
                role = (self.roles.get((b["metadata"].get("namespace"), ref["name"])) if ref["kind"] == "Role"
                        else self.cluster_roles.get(ref["name"]))
            else:
                role = self.cluster_roles.get(ref["name"]) if ref["kind"] == "ClusterRole" else None
            if role is not None:
                out.extend(role.get("rules") or [])
        return out

    def allows(self, call: Call) -> bool:
        if call.user == ADMIN:
            return True
        for rule in self.rules_for(call):
            if "nonResourceURLs" in rule:
                continue
            if not (_matches(rule.get("verbs"), call.verb) and _matches(rule.get("apiGroups"), call.group)
                    and _resource_matches(rule.get("resources"), call.resource, call.subresource)):
                continue
            names = rule.get("resourceNames")
            if names and (call.name is None or call.name not in names):
                continue
            return True
        return False

    def denied(self, calls: Iterable[Call]) -> list[Call]:
        """The calls these Roles do not allow (each distinct call once, in order)."""
        seen: dict[tuple[Any, ...], Call] = {}
        for c in calls:
            if not self.allows(c):
                seen.setdefault((c.user, c.verb, c.group, c.resource, c.subresource, c.namespace), c)
        return list(seen.values())


def unused_grants(role: dict[str, Any], calls: Iterable[Call]) -> list[str]:
    """The (verb, resource, group) a Role grants that none of ``calls`` used: a grant no code needs."""
    calls = list(calls)
    out = []
    for rule in role.get("rules") or []:
        for group in rule.get("apiGroups") or []:
            for res in rule.get("resources") or []:
                resource, _, sub = res.partition("/")
                for verb in rule.get("verbs") or []:
                    if not any(c.verb == verb and c.group == group and c.resource == resource
                               and (c.subresource or "") == sub for c in calls):
                        out.append(f"{verb} {res}" + (f".{group}" if group else ""))
    return out


def deploy_rbac_docs(base: Path) -> list[dict[str, Any]]:
    """The RBAC objects of a kustomize base: ``kubectl kustomize`` when installed, else its YAML files."""
    import yaml

    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        out = subprocess.run([kubectl, "kustomize", str(base)], capture_output=True, text=True, check=True, timeout=60)
        docs = list(yaml.safe_load_all(out.stdout))
    else:
        kust = yaml.safe_load((base / "kustomization.yaml").read_text())
        docs = [d for f in kust["resources"] for d in yaml.safe_load_all((base / f).read_text())]
    kinds = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
    return [d for d in docs if d and d.get("kind") in kinds]
