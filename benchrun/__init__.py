"""benchrun: a declarative, Kubernetes-native benchmark service for AI systems."""

__version__ = "0.1.0"
