"""What one schedule or sensor tick submits: specs pinned through ``benchrun.submit``, with run keys.

Dagster-free: the schedules and sensors call these functions and only translate the
outcome into run requests. Every path pins through :func:`benchrun.submit.prepare` (or
``submit``, which also registers the partition), so a tick and ``benchrun run`` make the
same run directory from the same bytes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchrun.automation import git
from benchrun.automation.commits import CommitWindow, commit_window
from benchrun.automation.discovery import (
    InvalidSpec,
    SpecDocument,
    ValidSpec,
    check_cadence,
    dataset_path_of,
    documents_at_commit,
    documents_in_folder,
    format_spec_errors,
    git_finder,
    is_spec_path,
    load_document,
    repo_candidates,
    select,
    sort_results,
)
from benchrun.automation.settings import RepoWatch
from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

SKIP_REASON_MAX = 4000
# (spec bytes, source, now[, the validated LoadedSpec of those bytes]) -> benchrun.submit.Prepared
Register = Callable[..., Any]


@dataclass(frozen=True)
class Submission:
    """One spec pinned for a run, and the run key that keeps a retried tick from running it twice."""

    run_key: str
    run_id: str
    name: str
    path: str
    spec_digest: str
    trigger: str  # "nightly", "pre_release", "canary", "spec-commit"
    commit: str | None = None
    prepared: Any = field(default=None, compare=False, repr=False)  # benchrun.submit.Prepared

    def tags(self) -> dict[str, str]:
        tags = {"benchrun/trigger": self.trigger, "benchrun/spec_path": self.path[-200:],
                "benchrun/spec_digest": self.spec_digest}
        if self.commit:
            tags["benchrun/commit"] = self.commit
        return tags


@dataclass
class TickOutcome:
    """Everything a tick decided: submissions, invalid documents, valid specs that could not be
    registered (``failed``: the shared state or the disk failed; tried again), notes, the next cursor."""

    submissions: list[Submission] = field(default_factory=list)
    invalid: list[InvalidSpec] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cursor: str | None = None
    failed: list[str] = field(default_factory=list)

    def skip_reason(self) -> str:
        """Why nothing was submitted, in one message (failures and invalid specs with their errors first)."""
        parts = [f"not submitted: {text}" for text in self.failed]
        parts += [f"invalid spec skipped: {bad.describe()}" for bad in self.invalid]
        parts += self.notes
        if not parts:
            return "nothing to submit"
        text = " | ".join(parts)
        if len(text) > SKIP_REASON_MAX:  # the tick log has every line; keep the UI's line readable
            text = text[:SKIP_REASON_MAX].rsplit(" | ", 1)[0] + f" | ... ({len(parts)} messages in all: see the tick log)"
        return text

    def add(self, sub: Submission) -> None:
        if any(s.run_id == sub.run_id for s in self.submissions):
            # Same bytes at the same second (e.g. two commits in one second): one run.
            self.notes.append(f"{sub.path}: same run {sub.run_id} already submitted in this tick")
            return
        self.submissions.append(sub)


def utc(ts: dt.datetime) -> dt.datetime:
    """``ts`` as an aware UTC time, whole seconds (run ids and run keys have second precision)."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.timezone.utc)
    return ts.astimezone(dt.timezone.utc).replace(microsecond=0)


@dataclass(frozen=True)
class PinRegister:
    """A :data:`Register` pinning through ``benchrun.submit`` under ``home``: ``prepare`` only,
    or ``submit`` (which also adds the partition) when ``instance`` is given."""

    home: Path | None
    instance: Any = None

    def __call__(self, data: bytes, source: str, now: dt.datetime, loaded: Any = None) -> Any:
        from benchrun.submit import prepare, submit

        if self.instance is None:
            return prepare(data, source=source, home=self.home, now=now, loaded=loaded)
        return submit(data, source=source, home=self.home, instance=self.instance, now=now, loaded=loaded)


def prepare_register(home: Path | None) -> Register:
    """Pin and create the run directory only (sensors request the partition themselves)."""
    return PinRegister(home)


def submit_register(home: Path | None, instance: Any) -> Register:
    """Pin, create the run directory and add the partition to ``instance`` (schedules, CLI)."""
    return PinRegister(home, instance)


def _submit(out: TickOutcome, register: Register, spec: ValidSpec, now: dt.datetime, *, run_key: str,
            trigger: str, commit: str | None = None) -> bool:
    """Pin ``spec`` through ``register`` and add its submission to ``out``; False when it was
    not submitted and should be tried again.

    A spec that cannot be pinned because of its own content goes to ``out.invalid`` (named
    ``path@sha`` for a commit's specs) and is never run. A valid spec whose pinning failed
    for another reason (the shared state, the disk: :func:`benchrun.submit.admission_fault`)
    goes to ``out.failed`` and False is returned, so a commit sensor keeps its cursor before
    the commit and the next tick tries it again.
    """
    from benchrun.submit import admission_fault

    where = f"{spec.path}@{commit[:12]}" if commit else spec.path
    try:
        pinned = register(spec.loaded.raw, spec.source, now, spec.loaded)  # validated once, dataset as found
    except BenchrunError as exc:
        invalid = admission_fault(exc, spec.loaded, spec.source, getattr(register, "home", None))
        if invalid is None:
            log.warning("could not register %s (not the spec's fault): %s", where, exc)
            out.failed.append(f"{where} is valid but could not be registered: {exc}")
            return False
        log.warning("could not submit %s: %s", where, invalid)
        out.invalid.append(InvalidSpec(path=where, source=spec.source, errors=format_spec_errors(invalid)))
        return True
    out.add(Submission(
        run_key=run_key, run_id=pinned.run_id, name=pinned.name, path=spec.path,
        spec_digest=spec.spec_digest, trigger=trigger, commit=commit, prepared=pinned,
    ))
    return True


def _stop_before(out: TickOutcome, state: SensorCursor, window: CommitWindow, sha: str,
                 pending: list[tuple[str, int]]) -> TickOutcome:
    """End a commit sensor's tick at ``sha``, which a valid spec of could not be registered:
    the cursor stays before it (with the rewrite entries as they were before it), so the next
    tick submits it again; the run keys of what it did submit keep that from running twice."""
    state.pending = pending
    later = len(window.commits) - window.commits.index(sha) - 1
    also = f" and the {later} after it" if later else ""
    out.notes.append(f"commit {sha[:12]}{also} left for the next tick, which tries again: fix the shared state "
                     "or the disk the error names (BENCHRUN_SHARED_STATE, BENCHRUN_HOME)")
    out.cursor = state.dump(window.resume_before(sha))
    return out


# -- schedules and `benchrun cadence run` ----------------------------------------------------


def cadence_tick(cadence: str, specs_dir: Path, now: dt.datetime, register: Register) -> TickOutcome:
    """Submit every spec under ``specs_dir`` that runs on ``cadence``, as of tick time ``now``.

    Run key ``<cadence>:<spec_digest>:<tick time>``: a retried tick (same scheduled time)
    gives the same keys and, because ``prepare`` is idempotent, the same run ids.
    """
    cadence = check_cadence(cadence)
    now = utc(now)
    found = select(documents_in_folder(specs_dir), cadence)
    out = TickOutcome(invalid=list(found.invalid))
    for spec in found.selected:  # one that could not be registered is in out.failed: the caller reports it
        _submit(out, register, spec, now, run_key=f"{cadence}:{spec.spec_digest}:{now:%Y%m%dT%H%M%SZ}",
                trigger=cadence)
    if not found.selected:
        out.notes.append(f"no {cadence} specs under {specs_dir}: a spec runs on {cadence} when "
                         f"intent.cadence is {cadence} and its automation.ci switch is true "
                         f"({len(found.other)} valid spec(s) of other cadences)")
    return out


# -- commit sensors -------------------------------------------------------------------------


def _commit_now(repo: Path, sha: str) -> dt.datetime:
    # The commit's own time, not the tick's: a retried tick mints the same run id.
    return dt.datetime.fromtimestamp(git.commit_time(repo, sha), tz=dt.timezone.utc)


def changed_spec_paths(repo: Path, sha: str, under: str) -> list[str]:
    """Spec documents below ``under`` that ``sha`` added or modified (against its first parent),
    and those whose dataset (``workload.dataset.path``, read from the commit) it added or
    modified: a dataset's bytes are part of its spec's digest."""
    changed = [c.path for c in git.changed_files(repo, sha)]
    specs = [p for p in changed if is_spec_path(p, under)]
    others = set(changed) - set(specs)
    if not others:
        return specs
    tree = dict(git.list_blobs(repo, sha))
    for path, blob in sorted(tree.items()):
        if path in specs or not is_spec_path(path, under):
            continue
        if _dataset_in_tree(repo, tree, path, blob) in others:
            specs.append(path)
    return specs


def _blob_and_dataset(repo: Path, tree: dict[str, str], path: str) -> tuple[str, str] | None:
    """What a spec's digest is made of in one tree: its blob and its dataset's blob (or "")."""
    blob = tree.get(path)
    if blob is None:
        return None
    dataset = _dataset_in_tree(repo, tree, path, blob)
    return blob, tree[dataset] if dataset else ""


def _as_at_since(repo: Path, sha: str, since: str, paths: list[str]) -> list[str]:
    """Those of ``paths`` (changed by ``sha`` against its first parent) that ``sha`` has as the
    window's start ``since`` had them (spec and dataset bytes), when that first parent does not
    descend from ``since``; else none.

    Found in review: `git pull` merges X, already submitted, into a local commit F made on X's
    parent; main fast-forwards X -> M, and M, compared with its first parent F, seemed to change
    X's spec again, to X's bytes; its run id comes from M's time, so the same spec ran twice.
    Only such a first parent is checked: on a line that descends from ``since`` a spec back at
    its ``since`` bytes was changed away and back (a revert, a re-apply) and runs again.
    """
    parent = git.first_parent(repo, sha)
    if not since or parent is None or git.is_ancestor(repo, since, parent):
        return []
    then, now = dict(git.list_blobs(repo, since)), dict(git.list_blobs(repo, sha))
    return [p for p in paths if p in then and _blob_and_dataset(repo, now, p) == _blob_and_dataset(repo, then, p)]


def _abandoned_specs(repo: Path, commits: Iterable[str], under: str) -> list[str]:
    """Keys (``spec:<path>:<digest>``) of the valid specs the abandoned commits changed: already submitted."""
    seen: list[str] = []
    for sha in commits:
        for doc in documents_at_commit(repo, sha, under, changed_spec_paths(repo, sha, under)):
            result = load_document(doc)
            if isinstance(result, ValidSpec):
                seen.append(f"spec:{result.path}:{result.spec_digest}")
    return seen


PENDING_MAX = 1000  # abandoned submissions remembered across ticks (oldest forgotten first)
PENDING_S = 2 * 86400  # ... and for how long after the rewrite was seen (commit time of the new head)


@dataclass
class SensorCursor:
    """A commit sensor's cursor: the last processed commit, and what commits abandoned by a
    history rewrite already submitted and a re-pushed commit must not submit again — spec
    ``(path, digest)`` keys for spec_commit, tree ids for the canary (a reworded or re-signed
    commit has the tree it had). Each entry stops one resubmission, by a commit made at most
    ``PENDING_S`` (two days) after the rewrite was seen, and is then dropped: a re-push comes
    soon after the rewrite, and a spec committed again later, on purpose, runs. Stored as JSON;
    a bare commit id (the form before this) reads as a cursor with nothing pending."""

    commit: str | None = None
    pending: list[tuple[str, int]] = field(default_factory=list)  # (key, until: epoch s of commit time)

    @classmethod
    def load(cls, text: str | None) -> "SensorCursor":
        if not text:
            return cls()
        if not text.lstrip().startswith("{"):
            return cls(text.strip())
        try:
            data = json.loads(text)
            return cls(data.get("commit") or None, [(str(k), int(u)) for k, u in data.get("pending") or []])
        except (ValueError, AttributeError, TypeError):
            log.warning("commit sensor cursor is not readable; starting at the head")
            return cls()

    def remember(self, keys: Iterable[str], seen_at: int) -> None:
        self.pending += [(k, seen_at + PENDING_S) for k in keys]

    def dump(self, commit: str) -> str:
        if not self.pending:
            return commit  # the plain form: what older code and people reading the UI expect
        return json.dumps({"commit": commit, "pending": [list(p) for p in self.pending[-PENDING_MAX:]]},
                          separators=(",", ":"))

    def consume(self, key: str, at: int) -> bool:
        """True (and forget it) when ``key`` was submitted by an abandoned commit and the commit
        offering it again (committed at ``at``) is within the entry's time; expired entries go."""
        self.pending = [(k, until) for k, until in self.pending if until >= at]
        for i, (k, _until) in enumerate(self.pending):
            if k == key:
                del self.pending[i]
                return True
        return False


def _window(watch: RepoWatch, cursor: SensorCursor) -> CommitWindow:
    return commit_window(git.repo_root(watch.repo), watch.branch, cursor.commit, watch.max_commits)


def spec_commit_tick(watch: RepoWatch, cursor: str | None, register: Register) -> TickOutcome:
    """Submit the specs each new commit on the watched branch added or changed.

    Run key ``spec-commit:<sha>:<path>:<spec_digest>``. After a force-push, specs whose
    (path, digest) an abandoned commit already submitted are not submitted again.
    """
    repo = git.repo_root(watch.repo)
    state = SensorCursor.load(cursor)
    window = _window(watch, state)
    out = TickOutcome()
    if window.note:
        out.notes.append(window.note)
    if window.abandoned:
        state.remember(_abandoned_specs(repo, window.abandoned, watch.specs_under), git.commit_time(repo, window.head))
    for sha in window.commits:
        paths = changed_spec_paths(repo, sha, watch.specs_under)
        if not paths:
            out.notes.append(f"commit {sha[:12]} touches no spec under {watch.specs_under or '.'}/")
            continue
        seen = _as_at_since(repo, sha, window.since, paths)
        out.notes += [f"{p}@{sha[:12]}: as at {window.since[:12]}, already processed (brought in by a merge)"
                      for p in seen]
        paths = [p for p in paths if p not in seen]
        if not paths:
            continue
        now = _commit_now(repo, sha)
        pending = list(state.pending)
        for doc in documents_at_commit(repo, sha, watch.specs_under, paths):
            result = load_document(doc)
            if isinstance(result, InvalidSpec):
                out.invalid.append(InvalidSpec(f"{result.path}@{sha[:12]}", result.source, result.errors))
                continue
            if state.consume(f"spec:{result.path}:{result.spec_digest}", int(now.timestamp())):
                out.notes.append(f"{result.path}@{sha[:12]}: same spec was submitted before the history rewrite")
                continue
            if not _submit(out, register, result, now, trigger="spec-commit", commit=sha,
                           run_key=f"spec-commit:{sha}:{result.path}:{result.spec_digest}"):
                return _stop_before(out, state, window, sha, pending)
    out.cursor = state.dump(window.next_cursor)
    return out


@functools.lru_cache(maxsize=4096)
def _dataset_written(repo: Path, blob: str) -> str | None:
    """The dataset path a spec blob names (blobs never change: cached per process)."""
    return dataset_path_of(git.read_object(repo, blob))


def _dataset_in_tree(repo: Path, tree: dict[str, str], path: str, blob: str) -> str | None:
    """The tree path of the dataset the spec ``path`` (its ``blob``) names, as ``git_finder``
    resolves it in that commit; None when it names none or the tree lacks it."""
    written = _dataset_written(repo, blob)
    return next((p for p in repo_candidates(written, path) if p in tree), None) if written else None


def _tree_results(repo: Path, sha: str, under: str,
                  cache: dict[tuple[str, str, str], ValidSpec | InvalidSpec]) -> list[ValidSpec | InvalidSpec]:
    """Validation results of every spec document in ``sha``'s tree, each distinct blob (with
    the blob of its dataset, read from the same tree) validated once."""
    results: list[ValidSpec | InvalidSpec] = []
    tree = dict(git.list_blobs(repo, sha))
    for path, blob in sorted(tree.items()):
        if not is_spec_path(path, under):
            continue
        source = f"{repo}@{sha[:12]}:{path}"
        found = _dataset_in_tree(repo, tree, path, blob)
        # a relative dataset path depends on the spec's folder, its bytes on the commit
        key = (blob, path if _dataset_written(repo, blob) else "", tree[found] if found else "")
        if key not in cache:
            cache[key] = load_document(SpecDocument(path=path, data=git.read_object(repo, blob), source=source,
                                                    find_dataset=git_finder(repo, sha, path)))
        results.append(dataclasses.replace(cache[key], path=path, source=source))
    return results


def canary_tick(watch: RepoWatch, cursor: str | None, register: Register) -> TickOutcome:
    """For each new commit on the watched branch, submit the canary specs as committed in it.

    Run key ``canary:<sha>:<path>:<spec_digest>``: once per commit and spec. After a history
    rewrite, a new commit with the tree of an abandoned one (reworded, re-signed) was canaried
    as that one and is not run again (:class:`SensorCursor`).
    """
    repo = git.repo_root(watch.repo)
    state = SensorCursor.load(cursor)
    window = _window(watch, state)
    out = TickOutcome()
    if window.note:
        out.notes.append(window.note)
    if window.abandoned:
        state.remember([f"tree:{git.tree_of(repo, sha)}" for sha in window.abandoned], git.commit_time(repo, window.head))
    reported: set[tuple[str, tuple[str, ...]]] = set()
    by_blob: dict[tuple[str, str, str], ValidSpec | InvalidSpec] = {}  # the tree rarely changes between commits
    for sha in window.commits:
        pending = list(state.pending)
        if state.pending and state.consume(f"tree:{git.tree_of(repo, sha)}", git.commit_time(repo, sha)):
            out.notes.append(f"commit {sha[:12]}: the same files as a commit canaried before the history rewrite")
            continue
        found = sort_results(_tree_results(repo, sha, watch.specs_under, by_blob), "canary")
        for bad in found.invalid:
            if (bad.path, bad.errors) not in reported:  # the same broken file in every commit: once
                reported.add((bad.path, bad.errors))
                out.invalid.append(InvalidSpec(f"{bad.path}@{sha[:12]}", bad.source, bad.errors))
        if not found.selected:
            out.notes.append(f"commit {sha[:12]}: no canary specs under {watch.specs_under or '.'}/")
            continue
        now = _commit_now(repo, sha)
        for spec in found.selected:
            if not _submit(out, register, spec, now, run_key=f"canary:{sha}:{spec.path}:{spec.spec_digest}",
                           trigger="canary", commit=sha):
                return _stop_before(out, state, window, sha, pending)
    out.cursor = state.dump(window.next_cursor)
    return out


__all__ = [
    "PinRegister",
    "Register",
    "Submission",
    "TickOutcome",
    "SpecDocument",
    "cadence_tick",
    "canary_tick",
    "changed_spec_paths",
    "prepare_register",
    "spec_commit_tick",
    "submit_register",
    "utc",
]
