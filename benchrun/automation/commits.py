"""Which commits of a watched branch a commit sensor has not yet seen (cursor = last commit)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from benchrun.automation import git
from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitWindow:
    """The commits one tick processes, oldest first, and the cursor to store after it."""

    head: str
    commits: tuple[str, ...]
    next_cursor: str
    # Commits that were processed earlier but are no longer on the branch (force-push):
    # from the merge base (exclusive) to the old cursor. Their specs are not submitted again.
    abandoned: tuple[str, ...] = ()
    note: str = ""
    # The commit the window starts after (the cursor, or the merge base after a rewrite): where
    # a tick that cannot finish its first commit leaves the cursor (:meth:`resume_before`).
    since: str = ""

    def resume_before(self, sha: str) -> str:
        """The cursor that makes the next tick start again at ``sha`` (one of ``commits``)."""
        i = self.commits.index(sha)
        return self.commits[i - 1] if i else self.since


def _short(sha: str) -> str:
    return sha[:12]


def commit_window(repo: Path, branch: str, cursor: str | None, max_commits: int) -> CommitWindow:
    """Compare the branch head with the cursor and list the new first-parent commits.

    * no cursor (first tick): start at the head; nothing is submitted for old history.
    * cursor is the head: nothing new.
    * cursor is an ancestor of the head: the commits after it.
    * cursor is off the branch (history rewritten): the commits after the merge base of the
      cursor and the head, with the abandoned commits listed so their specs are not sent twice.
    * cursor unknown here (rewritten and garbage-collected, or another repository): restart
      at the head and say so.
    At most ``max_commits`` are taken; the cursor then stops at the last one taken. What the
    abandoned commits already submitted is kept in the sensor's cursor
    (``benchrun.automation.ticks.SensorCursor``) until a later commit submits it again, so the
    cap holds after a rewrite too.
    """
    head = git.resolve_commit(repo, branch)
    if head is None:
        raise BenchrunError(
            f"branch {branch!r} has no commit in {repo}: set BENCHRUN_SPEC_BRANCH to an existing branch"
        )
    if cursor is None or cursor == "":
        return CommitWindow(head, (), head, note=f"first tick: watching {branch} from {_short(head)}; "
                            "commits after it will be submitted")
    if cursor == head:
        return CommitWindow(head, (), head, note=f"no new commits on {branch} since {_short(head)}")
    if git.resolve_commit(repo, cursor) is None:
        log.warning("cursor commit %s is not in %s; restarting at %s", cursor, repo, head)
        return CommitWindow(head, (), head, note=f"last processed commit {_short(cursor)} is not in the "
                            f"repository any more; restarting at {_short(head)} (commits in between are not "
                            "submitted: run `benchrun cadence run` or submit them by hand)")
    abandoned: tuple[str, ...] = ()
    note = ""
    if git.is_ancestor(repo, cursor, head):
        since = cursor
    else:
        base = git.merge_base(repo, cursor, head)
        if base is None:
            return CommitWindow(head, (), head, note=f"{branch} now has history unrelated to the last processed "
                                f"commit {_short(cursor)}; restarting at {_short(head)}")
        abandoned = tuple(git.first_parent_commits(repo, cursor, since=base))
        since = base
        note = (f"history of {branch} was rewritten: {_short(cursor)} is no longer on it; resuming from the "
                f"merge base {_short(base)} ({len(abandoned)} abandoned commit(s) not submitted again)")
        log.warning(note)
    commits = git.first_parent_commits(repo, head, since=since)
    if len(commits) > max_commits:
        rest = len(commits) - max_commits
        commits = commits[:max_commits]
        note = "; ".join(filter(None, [note, f"{rest} more commit(s) left for the next tick"]))
        return CommitWindow(head, tuple(commits), commits[-1], abandoned, note, since)
    return CommitWindow(head, tuple(commits), head, abandoned, note, since)
