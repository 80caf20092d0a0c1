"""The artifact store resource: a thin adapter over ``benchrun.store.open_store``."""


from pathlib import Path
from typing import Optional

import dagster as dg

from benchrun.paths import benchrun_home
from benchrun.store import ArtifactStore, ObjectManifest, open_store


class ArtifactStoreResource(dg.ConfigurableResource):
    """Where raw evidence is stored write-once. ``path_template`` None → ``$BENCHRUN_HOME/objects``;
    ``s3://bucket/prefix/${RUN_ID}/`` → S3 (credentials from the environment only; pass the
    endpoint as ``dg.EnvVar("BENCHRUN_S3_ENDPOINT_URL")`` or leave it to the environment)."""

    path_template: Optional[str] = None
    home: Optional[str] = None
    endpoint_url: Optional[str] = None
    retention_days: Optional[int] = None

    def home_path(self) -> Path:
        return benchrun_home(self.home)

    def open(self, path_template: Optional[str] = None, retention_days: Optional[int] = None) -> ArtifactStore:
        """The store for ``path_template`` (a run's ``sinks.rawArtifacts.pathTemplate``) or the
        configured one; object-lock retention from the configuration, else ``retention_days``
        (the run's retention class)."""
        return open_store(path_template or self.path_template, self.home_path(),
                          retention_days=self.retention_days or retention_days, endpoint_url=self.endpoint_url)

    def put_run_dir(self, run_dir: Path, run_id: str, path_template: Optional[str] = None) -> ObjectManifest:
        """Seal the run directory as ``benchrun.lifecycle.record_evidence`` does: status.json
        keeps changing after the run is stored, so it is never an object."""
        from benchrun.rundir import MUTABLE_FILES

        return self.open(path_template).put_run_dir(Path(run_dir), run_id, exclude=MUTABLE_FILES)

    def load_manifest(self, run_id: str, path_template: Optional[str] = None) -> ObjectManifest:
        return self.open(path_template).load_manifest(run_id)


artifact_store = ArtifactStoreResource()
