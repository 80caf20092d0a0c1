"""DSSE envelopes (Dead Simple Signing Envelope v1): pre-authentication encoding, sign, verify.

The signature covers ``PAE(payloadType, payload)`` = ``"DSSEv1" SP len(type) SP type SP
len(body) SP body`` with lengths as ASCII decimal byte counts, never the JSON around it,
so the envelope's own serialisation does not matter.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding of ``payload`` under ``payload_type``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def _b64decode(text: Any, what: str) -> bytes:
    """Standard or URL-safe base64, padded or not (the DSSE spec accepts either)."""
    if not isinstance(text, str):
        raise ValueError(f"{what} is not a base64 string")
    s = text.strip().replace("-", "+").replace("_", "/")
    s += "=" * (-len(s) % 4)
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{what} is not valid base64") from exc


@dataclass(frozen=True)
class Envelope:
    """A parsed DSSE envelope: the payload bytes and (keyid, signature) pairs."""

    payload_type: str
    payload: bytes
    signatures: tuple[tuple[str, bytes], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "payloadType": self.payload_type,
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "signatures": [{"keyid": k, "sig": base64.b64encode(s).decode("ascii")} for k, s in self.signatures],
        }

    @classmethod
    def from_json(cls, doc: Any) -> "Envelope":
        """Parse an envelope document; ValueError says which field is wrong."""
        if not isinstance(doc, dict):
            raise ValueError("the envelope is not a JSON object")
        ptype = doc.get("payloadType")
        if not isinstance(ptype, str) or not ptype:
            raise ValueError("payloadType is missing")
        sigs = doc.get("signatures")
        if not isinstance(sigs, list) or not sigs:
            raise ValueError("signatures is missing or empty")
        pairs = []
        for i, s in enumerate(sigs):
            if not isinstance(s, dict):
                raise ValueError(f"signatures[{i}] is not an object")
            pairs.append((str(s.get("keyid") or ""), _b64decode(s.get("sig"), f"signatures[{i}].sig")))
        return cls(ptype, _b64decode(doc.get("payload"), "payload"), tuple(pairs))


def sign(payload_type: str, payload: bytes, key: Ed25519PrivateKey, keyid: str) -> Envelope:
    """An envelope with one ed25519 signature over ``PAE(payload_type, payload)``."""
    return Envelope(payload_type, payload, ((keyid, key.sign(pae(payload_type, payload))),))


def verify(envelope: Envelope, key: Ed25519PublicKey, keyid: str) -> bool:
    """True when a signature by ``keyid`` (or one without a keyid) verifies with ``key``."""
    message = pae(envelope.payload_type, envelope.payload)
    for kid, sig in envelope.signatures:
        if kid and kid != keyid:
            continue
        try:
            key.verify(sig, message)
            return True
        except InvalidSignature:
            continue
    return False
