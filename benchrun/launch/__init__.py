"""Launchers: one protocol, a local (subprocess) implementation, a Kubernetes one at scale."""

from benchrun.launch.base import Launcher, LaunchResult
from benchrun.launch.local import LocalLauncher

__all__ = ["Launcher", "LaunchResult", "LocalLauncher"]
