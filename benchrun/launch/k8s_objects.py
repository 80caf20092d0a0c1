"""Building the Kubernetes objects the launcher creates: where the API keeps them (Kueue
Workloads, JobSets, the run-id label), a Job manifest checked as a ``V1Job`` model, and the pod's
environment (Pipes messages go to the pod's log).

The manifests themselves are pure functions of an invocation: ``podspec.job_manifest`` (one Job),
``podspec.layer_job_manifest`` (a publication-grade layer) and ``jobset.jobset_manifest`` (a
multi-node gang).
"""

from __future__ import annotations

from typing import Any, Mapping

from dagster_pipes import DAGSTER_PIPES_MESSAGES_ENV_VAR, encode_env_var

from benchrun.launch.podspec import LABEL_PREFIX

KUEUE_GROUP, KUEUE_VERSION, WORKLOADS = "kueue.x-k8s.io", "v1beta2", "workloads"
JOBSET_GROUP, JOBSET_VERSION, JOBSETS = "jobset.x-k8s.io", "v1alpha2", "jobsets"
# the label JobSet puts on its Jobs and pods: its uid (a JobSet of the same name made anew has another)
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
# the one replicated Job of a suite's JobSet (benchrun.launch.jobset): child Job <jobset>-node-0
REPLICATED_JOB = "node"
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
RUN_ID_LABEL = LABEL_PREFIX + "run-id"
MANAGED_BY_SELECTOR = "app.kubernetes.io/managed-by=benchrun"


def snake_keys(klass: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest (camelCase, as the API takes it) with model field names (snake_case), as
    dagster-k8s's ``k8s_model_from_dict`` takes it. Keys the model does not know are kept as
    written, so ``k8s_model_from_dict`` names them; free-form maps (labels, env) are left alone."""
    import kubernetes.client.models as models

    def convert(typ: str | None, value: Any) -> Any:
        if typ is None or value is None:
            return value
        if typ.startswith("list[") and isinstance(value, list):
            return [convert(typ[5:-1], v) for v in value]
        model = getattr(models, typ, None)
        if model is not None and isinstance(value, Mapping) and hasattr(model, "attribute_map"):
            return snake_keys(model, value)
        return value

    by_json = {v: k for k, v in klass.attribute_map.items()}
    out: dict[str, Any] = {}
    for key, value in data.items():
        attr = by_json.get(key, key)
        out[attr] = convert(klass.openapi_types.get(attr), value)
    return out


def job_model(manifest: dict[str, Any]) -> Any:
    """The manifest as a ``V1Job`` (dagster-k8s's ``k8s_model_from_dict``): a misspelt field
    raises BenchrunError naming it, before anything is created."""
    from dagster_k8s.models import k8s_model_from_dict
    from kubernetes.client import V1Job

    from benchrun.errors import BenchrunError

    try:
        return k8s_model_from_dict(V1Job, snake_keys(V1Job, manifest))
    except Exception as exc:  # dagster-k8s raises a plain Exception naming the bad keys
        raise BenchrunError(f"Job {manifest['metadata']['name']}: not a valid batch/v1 Job: {exc}") from None


def pod_env(extra_env: Mapping[str, str] | None) -> dict[str, str]:
    """The session's environment for a pod: Pipes messages go to the pod's log."""
    env = dict(extra_env or {})
    if DAGSTER_PIPES_MESSAGES_ENV_VAR in env:
        # Whatever reader the session chose for a local process, in a pod the messages
        # go to the log (PipesK8sPodLogsMessageReader reads them there) unless the
        # session already names a pod-reachable channel (an S3 bucket).
        from dagster_pipes import decode_env_var

        try:
            params = decode_env_var(env[DAGSTER_PIPES_MESSAGES_ENV_VAR])
        except Exception:
            params = {}
        if not isinstance(params, dict) or "path" in params:
            env[DAGSTER_PIPES_MESSAGES_ENV_VAR] = encode_env_var({"stdio": "stderr"})
    return env
