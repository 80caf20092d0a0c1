"""Host telemetry through psutil: per-core and total CPU, memory, disk and network I/O, context
switches, run-queue length, CPU frequency, and the CPU split between the suite, the harness and
everything else on the machine (the background load)."""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

from benchrun.telemetry.samples import Sample

SOURCE = "psutil"
# The suite's whole process tree is listed again this often (``children(recursive=True)`` reads
# every process's /proc/<pid>/stat: 0.9 ms for 87 processes, ~10 µs each, so tens of ms on a node
# with thousands). Between listings each sample looks only at the processes started since the last
# one (the pid list: 0.03 ms) and adds those whose parent is in the tree, so a child the suite starts
# is its from the next sample on. Until 2026-12-07 new children were found only at these listings:
# a busy child started 0.3 s in counted as background (41-53 % of a 2-core machine at 10 Hz) until
# 1.0 s, and all its CPU then landed in one tick where the suite's share is capped at 100 %: ~17 %
# mean background over a 2 s run, above the contention threshold on an idle machine.
TREE_REFRESH_S = 1.0


def _busy(t: Any) -> tuple[float, float]:
    """(busy, total) seconds of a psutil cpu_times tuple; iowait counts as idle.

    ``guest`` and ``guest_nice`` (time running virtual CPUs) are already in ``user`` and ``nice``
    on Linux, so they are not added again (until 2026-12-07 they were: a host running VMs read busier)."""
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    idle = t.idle + getattr(t, "iowait", 0.0)
    return total - idle, total


def _pct(num: float, den: float) -> float | None:
    return max(0.0, min(100.0, 100.0 * num / den)) if den > 0 else None


def _whole_disks(disks: dict[str, Any], sys_block: str = "/sys/block") -> dict[str, Any]:
    """psutil's per-disk counters less partitions, as its own total counts them (on Linux a whole
    device has an entry in /sys/block; elsewhere every entry is one)."""
    try:
        whole = set(os.listdir(sys_block))
    except OSError:
        return disks
    return {name: c for name, c in disks.items() if name.replace("/", "!") in whole}


def _grown(cur: dict[str, Any], prev: dict[str, Any], field: str) -> float:
    """How much ``field`` grew, summed over the devices present at both samples, each at least 0.

    Per device rather than psutil's machine totals: a disk or interface that disappears takes its
    counts out of the total (a negative rate) and one that appears brings its whole history into it
    (a spike); psutil's ``nowrap`` only mends a counter that wrapped."""
    return float(sum(max(0, getattr(c, field) - getattr(prev[name], field)) for name, c in cur.items() if name in prev))


def _run_queue() -> float | None:
    """Runnable tasks now (``procs_running`` of /proc/stat), Linux only."""
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"procs_running "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


class HostProbe:
    """Reads the host once per call and turns counters into rates against the previous call.

    ``suite_pids`` (added as the suite's processes start; a local gang has one per node) lead the
    suite's process trees; CPU used by those trees is the suite's, CPU used by this process is the harness's (launcher and
    sampler), and the rest of the machine's busy time is background load.
    """

    def __init__(self, node_name: str | None = None) -> None:
        self.node_name = node_name
        self.suite_pids: list[int] = []
        self._own = psutil.Process()
        self._ncpu = psutil.cpu_count() or 1
        self._prev: dict[str, Any] | None = None
        self._tree: dict[int, psutil.Process] = {}
        self._tree_at = 0.0
        self._tree_cpu_dead = 0.0  # CPU of tree members seen before that have exited since
        self._tree_last: dict[int, float] = {}
        self._pids_seen: set[int] | None = None  # every pid at the last look, to tell new processes
        self._own_children: float | None = None

    def watch(self, pid: int) -> None:
        """Add a suite process (a tree root); its tree is looked at again on the next sample."""
        self.suite_pids.append(pid)
        self._tree_at = 0.0
        # Hold the root now: a suite reaped before the next sample must still be seen to have
        # gone, so that its CPU (in our children times) is counted, not lost.
        try:
            self._tree.setdefault(pid, psutil.Process(pid))
            self._tree_last.setdefault(pid, 0.0)
        except psutil.Error:
            pass

    def _suite_cpu(self, now: float, reaped_cpu: float) -> tuple[float, float] | None:
        """(CPU seconds, RSS bytes) of the suite's process tree so far, or None without a suite.

        ``reaped_cpu``: growth of this process's children CPU times since the last sample. The
        launcher reaps a suite root itself, so a root that vanished shows up there with its
        whole life's CPU, including the part after our last look at it.
        """
        if not self.suite_pids:
            return None
        self._discover(now)
        cpu = 0.0
        rss = 0.0
        gone_roots = 0.0
        any_root_gone = False
        for pid, p in list(self._tree.items()):
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    # children_*: CPU of descendants already reaped, including short-lived ones
                    # that started and ended between two looks at the tree.
                    used = t.user + t.system + t.children_user + t.children_system
                    rss += p.memory_info().rss
            except psutil.Error:
                # Gone. A member reaped by its parent in the tree reappears in that parent's
                # children_* times; only a tree root (reaped by the launcher) is kept here.
                last = self._tree_last.pop(pid, 0.0)
                if pid in self.suite_pids:
                    gone_roots += last
                    any_root_gone = True
                del self._tree[pid]
                continue
            self._tree_last[pid] = used
            cpu += used
        if any_root_gone:
            self._tree_cpu_dead += max(gone_roots, reaped_cpu)
        return cpu + self._tree_cpu_dead, rss

    def _of_a_suite_session(self, pid: int) -> bool:
        """Whether ``pid`` is in the session a suite root leads: the launcher starts each suite in a session
        of its own and counts everything left in it as the suite's. A process whose parent exited (``cmd &``
        in a shell that ends, a server that daemonizes) is reparented to pid 1 out of the parent tree, and its
        CPU was counted as background: the suite flagged its own run contended (review 2026-12-08)."""
        try:
            return os.getsid(pid) in self.suite_pids
        except OSError:
            return False

    def _discover(self, now: float) -> None:
        """Add the suite's new processes to the tree: a full listing every TREE_REFRESH_S (and
        after ``watch``), else only the processes started since the last look whose parent is in it;
        both take too the processes of a suite root's session that left the parent tree."""
        try:
            pids: set[int] | None = set(psutil.pids())  # before the listing: what starts after it is new next time
        except (psutil.Error, OSError):
            pids = None
        seen, self._pids_seen = self._pids_seen, pids
        if now - self._tree_at >= TREE_REFRESH_S or not self._tree or seen is None:
            self._tree_at = now
            for root in self.suite_pids:
                try:
                    leader = self._tree.get(root) or psutil.Process(root)
                    members = [leader, *leader.children(recursive=True)]
                except psutil.Error:
                    continue
                for p in members:
                    self._tree.setdefault(p.pid, p)
            for pid in pids or ():
                if pid not in self._tree and self._of_a_suite_session(pid):
                    try:
                        self._tree.setdefault(pid, psutil.Process(pid))
                    except psutil.Error:
                        continue
            return
        if pids is None:
            return
        parent_of: dict[int, tuple[psutil.Process, int]] = {}
        for pid in pids - seen:
            try:
                p = psutil.Process(pid)
                parent_of[pid] = (p, p.ppid())
            except psutil.Error:
                continue
        grew = True
        while grew:  # a new child of a new child joins once its parent has
            grew = False
            for pid, (p, ppid) in list(parent_of.items()):
                if ppid in self._tree or self._of_a_suite_session(pid):
                    self._tree.setdefault(pid, p)
                    del parent_of[pid]
                    grew = True

    def sample(self) -> list[Sample]:
        now = time.time()
        mono = time.monotonic()
        per_core = psutil.cpu_times(percpu=True)
        total = psutil.cpu_times()
        own = self._own.cpu_times()
        own_cpu = own.user + own.system
        own_children = own.children_user + own.children_system
        reaped = max(0.0, own_children - self._own_children) if self._own_children is not None else 0.0
        self._own_children = own_children
        suite = self._suite_cpu(mono, reaped)
        disk = _whole_disks(psutil.disk_io_counters(perdisk=True) or {})
        net = psutil.net_io_counters(pernic=True) or {}
        stats = psutil.cpu_stats()
        vm = psutil.virtual_memory()
        swap = psutil.swap_memory()
        freq = psutil.cpu_freq()
        cur = {"mono": mono, "per_core": per_core, "total": total, "own": own_cpu, "suite": suite,
               "disk": disk, "net": net, "stats": stats}
        out: list[Sample] = []

        def add(metric: str, value: float | None, unit: str, *, scope: str = "node", index: int | None = None,
                interval: float | None = None) -> None:
            if value is not None:
                out.append(Sample(now, SOURCE, scope, metric, float(value), unit, device_index=index,
                                  interval_s=interval, node_name=self.node_name))

        add("memory_used_bytes", vm.total - vm.available, "bytes")
        add("memory_available_bytes", vm.available, "bytes")
        add("memory_used_pct", vm.percent, "%")
        add("swap_used_bytes", swap.used, "bytes")
        add("run_queue_length", _run_queue(), "tasks")
        add("load_average_1m", os.getloadavg()[0], "load")
        if freq is not None and freq.current:
            add("cpu_frequency_mhz", freq.current, "MHz")
        if suite is not None:
            add("suite_rss_bytes", suite[1], "bytes", scope="process")
        prev, self._prev = self._prev, cur
        if prev is None:
            return out
        dt = mono - prev["mono"]
        if dt <= 0:
            return out
        for i, (a, b) in enumerate(zip(prev["per_core"], per_core)):
            busy_a, tot_a = _busy(a)
            busy_b, tot_b = _busy(b)
            add("cpu_core_utilization_pct", _pct(busy_b - busy_a, tot_b - tot_a), "%", scope="core", index=i, interval=dt)
        busy_a, tot_a = _busy(prev["total"])
        busy_b, tot_b = _busy(total)
        busy, span = busy_b - busy_a, tot_b - tot_a
        add("cpu_utilization_pct", _pct(busy, span), "%", interval=dt)
        add("cpu_iowait_pct", _pct(getattr(total, "iowait", 0.0) - getattr(prev["total"], "iowait", 0.0), span), "%",
            interval=dt)
        # Shares of the whole machine (all cores): suite, harness, and the rest.
        capacity = dt * self._ncpu
        harness = max(0.0, own_cpu - prev["own"])
        add("harness_cpu_pct", _pct(harness, capacity), "%", scope="process", interval=dt)
        suite_used = 0.0
        if suite is not None:
            # No suite at the previous sample: it was spawned since, so all its CPU is new.
            suite_used = max(0.0, suite[0] - (prev["suite"][0] if prev["suite"] is not None else 0.0))
            add("suite_cpu_pct", _pct(suite_used, capacity), "%", scope="process", interval=dt)
        if span > 0:
            # busy is in CPU-seconds over `span` CPU-seconds of capacity (from /proc/stat).
            other = max(0.0, busy - suite_used - harness)
            add("background_cpu_pct", _pct(other, span), "%", interval=dt)
        if disk.keys() & prev["disk"].keys():
            d0 = prev["disk"]
            add("disk_read_bytes_per_s", _grown(disk, d0, "read_bytes") / dt, "B/s", interval=dt)
            add("disk_write_bytes_per_s", _grown(disk, d0, "write_bytes") / dt, "B/s", interval=dt)
            add("disk_read_ops_per_s", _grown(disk, d0, "read_count") / dt, "ops/s", interval=dt)
            add("disk_write_ops_per_s", _grown(disk, d0, "write_count") / dt, "ops/s", interval=dt)
        if net.keys() & prev["net"].keys():
            n0 = prev["net"]
            add("net_rx_bytes_per_s", _grown(net, n0, "bytes_recv") / dt, "B/s", interval=dt)
            add("net_tx_bytes_per_s", _grown(net, n0, "bytes_sent") / dt, "B/s", interval=dt)
        add("context_switches_per_s", (stats.ctx_switches - prev["stats"].ctx_switches) / dt, "1/s", interval=dt)
        add("interrupts_per_s", (stats.interrupts - prev["stats"].interrupts) / dt, "1/s", interval=dt)
        return out
