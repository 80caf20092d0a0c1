"""What a Kubernetes run records of its image: the reference by digest, whatever tag it was asked by."""

from __future__ import annotations

from benchrun.launch.podenv import image_digest, pinned_reference

D = "sha256:" + "e" * 64


def test_the_image_is_recorded_by_digest_with_its_tag_dropped():
    assert pinned_reference("registry.example.com/benchrun:0.1.0-cuda", D) == f"registry.example.com/benchrun@{D}"
    assert pinned_reference("registry.example.com:5000/team/benchrun:latest", D) == \
        f"registry.example.com:5000/team/benchrun@{D}"
    assert pinned_reference("benchrun", D) == f"benchrun@{D}"
    assert pinned_reference(f"r.example/b:1@sha256:{'a' * 64}", D) == f"r.example/b@{D}"  # what ran wins
    assert pinned_reference("benchrun:1", None) is None and pinned_reference(None, D) is None
    assert image_digest(f"docker-pullable://r.example/b@{D}") == D and image_digest("") is None
