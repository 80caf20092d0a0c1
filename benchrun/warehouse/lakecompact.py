"""Which partitions of an Iceberg table a compaction rewrites (:func:`benchrun.warehouse.lake.compact`)."""

from __future__ import annotations

from typing import Any

DEFAULT_TARGET_FILE_SIZE = 512 << 20  # pyiceberg's write.target-file-size-bytes where the table sets none


def partitions_to_compact(tbl: Any, skip: set[tuple]) -> list[tuple[tuple, int]]:
    """(partition, bytes on disk) of each partition of ``tbl``'s current spec worth rewriting, oldest
    day first; ``skip``: rewritten already.

    A partition is worth it when its live data files were added by more than one snapshot (several
    runs, a run after a compaction, a re-curation's rewrite of a compacted file) and are more than its
    size on disk needs at the target file size. The files one snapshot added are as its writer split
    them: pyiceberg splits by in-memory Arrow bytes (``bin_pack_arrow_table``), 3-10 times the
    compressed bytes on disk, so a compaction's several files rewritten would be split alike, and at
    every maintenance. The adding snapshot is the manifest entry's, which manifest merges and rewrites
    keep and which outlives that snapshot's expiry: a compacted partition stays compact for good."""
    from pyiceberg.manifest import ManifestContent
    from pyiceberg.utils.concurrent import ExecutorFactory

    target = int(tbl.properties.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))
    spec_id = tbl.spec().spec_id
    manifests = [m for m in tbl.current_snapshot().manifests(tbl.io)
                 if m.content == ManifestContent.DATA and m.partition_spec_id == spec_id]
    parts: dict[tuple, tuple[list[int], set[int]]] = {}
    for entries in ExecutorFactory.get_or_create().map(lambda m: m.fetch_manifest_entry(tbl.io), manifests):
        for entry in entries:  # the live ones
            f = entry.data_file
            sizes, added_by = parts.setdefault(tuple(f.partition[i] for i in range(len(f.partition))), ([], set()))
            sizes.append(f.file_size_in_bytes)
            added_by.add(entry.snapshot_id)
    return [(key, sum(sizes)) for key, (sizes, added_by) in sorted(parts.items(), key=lambda kv: _day_order(kv[0]))
            if key not in skip and len(added_by) > 1 and len(sizes) > max(1, -(-sum(sizes) // target))]


def _day_order(key: tuple) -> list[tuple[bool, Any]]:
    """A partition's sort key: nulls (no run start, no suite) first."""
    return [(v is not None, v) for v in key]


def any_of(exprs: list[Any]) -> Any:
    """``Or`` of ``exprs`` as a balanced tree: pyiceberg's visitors recurse once per level."""
    from pyiceberg.expressions import Or

    half = len(exprs) // 2
    return exprs[0] if len(exprs) == 1 else Or(any_of(exprs[:half]), any_of(exprs[half:]))
