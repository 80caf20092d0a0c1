"""The ed25519 signing key: from ``$BENCHRUN_SIGNING_KEY`` or made once under ``$BENCHRUN_HOME/keys``.

Key material is never logged or put in a message; only the key id (sha256 of the raw
32-byte public key) and file paths are.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from benchrun.errors import BenchrunError
from benchrun.paths import home_location
from benchrun.fsio import atomic_write_text, create_once

log = logging.getLogger(__name__)

KEY_ENV = "BENCHRUN_SIGNING_KEY"
KEY_PASSWORD_ENV = "BENCHRUN_SIGNING_KEY_PASSWORD"
LOCAL_KEY_NAME = "ed25519.pem"
LOCAL_PUB_NAME = "ed25519.pub.pem"


@dataclass(frozen=True)
class SigningKey:
    """A private key with its public half, key id, and where it came from (a path, never bytes)."""

    private: Ed25519PrivateKey
    public: Ed25519PublicKey
    keyid: str
    source: str
    public_path: Path | None

    def __repr__(self) -> str:  # never show the key object's internals
        return f"SigningKey(keyid={self.keyid!r}, source={self.source!r})"


def keyid_of(public: Ed25519PublicKey) -> str:
    """sha256 (hex) of the raw 32-byte public key."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _load_private(path: Path, password: bytes | None) -> Ed25519PrivateKey:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BenchrunError(f"signing key {path} does not exist; set {KEY_ENV} to a PEM ed25519 private key "
                            "or unset it to use the local key") from None
    except OSError as exc:
        raise BenchrunError(f"signing key {path} cannot be read ({exc.strerror})") from None
    try:
        key = serialization.load_pem_private_key(data, password=password)
    except TypeError:
        # Encrypted without a password, or a password for an unencrypted key.
        raise BenchrunError(f"signing key {path}: set {KEY_PASSWORD_ENV} for an encrypted key "
                            "(and only for one)") from None
    except ValueError:
        raise BenchrunError(f"signing key {path} is not a readable PEM private key "
                            f"(or {KEY_PASSWORD_ENV} is wrong)") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BenchrunError(f"signing key {path} is a {type(key).__name__.lstrip('_')}, not ed25519; "
                            "make one with `openssl genpkey -algorithm ed25519`")
    return key


def _check_private_mode(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise BenchrunError(f"signing key {path} is readable by others (mode {mode:o}); run `chmod 600 {path}`")


def _create_local(path: Path) -> None:
    """Write a new key to ``path`` (0600) unless one appears there first; never half a file."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    # fsio.create_once links a complete 0600 file: if another process made the key meanwhile, theirs wins
    if create_once(path, lambda fh: fh.write(pem), mode=0o600):
        log.info("made a new local ed25519 signing key %s (keyid %s)", path, keyid_of(key.public_key()))


def local_key_paths(home: Path | str | None = None) -> tuple[Path, Path]:
    """Where the local key pair lies (nothing created: a command that only verifies leaves no home behind)."""
    keys = home_location(home)[0] / "keys"
    return keys / LOCAL_KEY_NAME, keys / LOCAL_PUB_NAME


def _env_password() -> bytes | None:
    """``$BENCHRUN_SIGNING_KEY_PASSWORD`` as bytes (None when unset or empty)."""
    password_text = os.environ.get(KEY_PASSWORD_ENV)
    return password_text.encode("utf-8") if password_text else None


def load_signing_key(home: Path | str | None = None) -> SigningKey:
    """``$BENCHRUN_SIGNING_KEY`` (a PEM path) if set, else the local key, made on first use."""
    env = os.environ.get(KEY_ENV)
    password = _env_password()
    if env:
        path = Path(env).expanduser()
        key = _load_private(path, password)
        try:  # a warning, not a refusal: a mounted Secret is 0644 unless its defaultMode says otherwise
            _check_private_mode(path)
        except BenchrunError as exc:
            log.warning("%s: %s; or mount it with defaultMode 0400", f"${KEY_ENV}", exc)
        return SigningKey(key, key.public_key(), keyid_of(key.public_key()), f"${KEY_ENV} ({path})", None)
    priv_path, pub_path = local_key_paths(home)
    priv_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not priv_path.exists():
        if pub_path.exists():
            # the public key of a key that signed this home's runs: a new key made here overwrote it, and
            # promote and compare (which verify with it) then refused every earlier run (review 2026-12-08)
            raise BenchrunError(
                f"signing key {priv_path} is missing, but {pub_path} (keyid {_keyid_of_file(pub_path)}) is there: "
                "the key that signed this home's runs. A new key would replace that public key and every earlier "
                f"run would fail verify, promote and compare. Restore {priv_path.name} from a backup (mode 0600); or, "
                f"to start a new key on purpose, move {pub_path.name} out of {pub_path.parent} first (`benchrun verify "
                "RUN --public-key THAT_FILE` still checks the runs it signed), or set $BENCHRUN_SIGNING_KEY")
        _create_local(priv_path)
    _check_private_mode(priv_path)
    key = _load_private(priv_path, None)
    public = key.public_key()
    pem = public_pem(public)
    try:
        earlier = pub_path.read_bytes()
    except FileNotFoundError:
        earlier = None
    if earlier is not None and earlier != pem.encode("utf-8"):
        # the private key was replaced: keep the public key that signed the earlier runs beside the new one (named
        # by its keyid, or, unreadable, by its bytes' hash)
        try:
            tag = keyid_of(load_public_key(pub_path))
        except BenchrunError:
            tag = "unreadable-" + hashlib.sha256(earlier).hexdigest()[:16]
        kept = pub_path.with_name(f"ed25519.{tag}.pub.pem")
        with contextlib.suppress(FileNotFoundError):  # another signer moved it first
            os.replace(pub_path, kept)
            log.warning("the local signing key changed (now keyid %s): the earlier public key is kept as %s; verify "
                        "the runs it signed with `benchrun verify RUN --public-key %s`", keyid_of(public), kept, kept)
    if not pub_path.exists():
        atomic_write_text(pub_path, pem)
        os.chmod(pub_path, 0o644)
    return SigningKey(key, public, keyid_of(public), str(priv_path), pub_path)


def _keyid_of_file(path: Path) -> str:
    """The keyid of the public key in ``path``, or what is wrong with the file."""
    try:
        return keyid_of(load_public_key(path))
    except BenchrunError as exc:
        return f"unreadable: {exc}"


def load_public_key(path: Path | str) -> Ed25519PublicKey:
    """A PEM ed25519 public key (a PEM private key is accepted too: its public half is used)."""
    p = Path(path).expanduser()
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise BenchrunError(f"public key {p} cannot be read ({exc.strerror})") from None
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        try:
            key = serialization.load_pem_private_key(data, password=None).public_key()
        except TypeError:  # an encrypted private key: opened as signing opens it ($BENCHRUN_SIGNING_KEY_PASSWORD)
            key = _load_private(p, _env_password()).public_key()
        except ValueError:
            raise BenchrunError(f"public key {p} is not a PEM ed25519 key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BenchrunError(f"public key {p} is not ed25519")
    return key


TRUSTED_KEYIDS_ENV = "BENCHRUN_TRUSTED_KEYIDS"
VERIFY_KEY_ENV = "BENCHRUN_VERIFY_PUBLIC_KEY"


def trusted_keyids(extra: list[str] | tuple[str, ...] = ()) -> set[str]:
    """Pinned key fingerprints (sha256 of the raw public key, hex): ``$BENCHRUN_TRUSTED_KEYIDS``
    (comma-separated) plus ``extra`` (``--trust-keyid``)."""
    raw = [k for k in os.environ.get(TRUSTED_KEYIDS_ENV, "").split(",")] + list(extra)
    return {k.strip().lower() for k in raw if k.strip()}


def trust_configured(pinned: list[str] | tuple[str, ...] = ()) -> bool:
    """Whether any trust is configured: a pinned keyid (``$BENCHRUN_TRUSTED_KEYIDS`` or ``pinned``),
    ``$BENCHRUN_VERIFY_PUBLIC_KEY`` or ``$BENCHRUN_SIGNING_KEY``."""
    return bool(trusted_keyids(pinned)) or any(os.environ.get(env) for env in (VERIFY_KEY_ENV, KEY_ENV))


def home_key_fallback(home: Path | str | None = None, pinned: list[str] | tuple[str, ...] = (), *,
                      strict: bool = True) -> Path | None:
    """None when a trusted key is configured (:func:`default_public_key` finds one); else the path of
    the home's own public key, which shows a run's files unchanged since signing, not who signed
    them (what promote, compare and re-signing fall back to). BenchrunError when neither exists.

    The fallback is only for a home where nothing is configured (:func:`trust_configured`): a pinned
    keyid the home's key does not match, or a configured key that cannot be read, is that error
    (before, it fell back to the very key the pin refused, and promote published, saying no trusted
    key was configured). ``strict=False`` (re-signing, which checks only that the files it signs again
    are the ones signed before, with the key that signed them) falls back all the same: a pin meant for
    imported baselines blocked every re-sign of this home's own runs (found in review)."""
    try:
        default_public_key(home, pinned)
        return None
    except BenchrunError:
        if strict and trust_configured(pinned):
            raise
        pub = local_key_paths(home)[1]
        if not pub.is_file():
            raise
        return pub


def default_public_key(home: Path | str | None = None,
                       pinned: list[str] | tuple[str, ...] = ()) -> tuple[Ed25519PublicKey, str]:
    """The key signatures are checked with when none is passed, trusted only from configuration.

    ``$BENCHRUN_VERIFY_PUBLIC_KEY`` (a PEM public key) or ``$BENCHRUN_SIGNING_KEY`` (the signing
    key's path) are configuration; ``<home>/keys/ed25519.pub.pem`` lives in the directory being
    verified, so whoever can forge evidence there can replace it: it is used only when its
    fingerprint is pinned (``$BENCHRUN_TRUSTED_KEYIDS`` or ``pinned``).
    """
    for env in (VERIFY_KEY_ENV, KEY_ENV):
        value = os.environ.get(env)
        if value:  # a private key (the signing key, encrypted too: as signing opens it) gives its public half
            return load_public_key(value), f"${env} ({value})"
    _, pub_path = local_key_paths(home)
    if not pub_path.exists():
        raise BenchrunError(f"no trusted public key: set {VERIFY_KEY_ENV} (or pass --public-key to verify or promote) "
                            f"(there is no key at {pub_path} either)")
    public = load_public_key(pub_path)
    keyid = keyid_of(public)
    trusted = trusted_keyids(pinned)
    if keyid not in trusted:
        pinned_note = (f"the keyid(s) pinned ({', '.join(sorted(trusted))}) do not match it (a keyid is the whole "
                       "64-hex fingerprint); " if trusted else "")
        raise BenchrunError(
            f"{pinned_note}the public key {pub_path} (keyid {keyid}) is not trusted: it lives in the home being verified, "
            f"where whoever forged the evidence could have replaced it; pass --public-key, set {VERIFY_KEY_ENV}, "
            f"or, after checking the fingerprint out of band, pin it with --trust-keyid {keyid} or {TRUSTED_KEYIDS_ENV}"
        )
    return public, f"{pub_path} (pinned keyid {keyid[:16]})"
