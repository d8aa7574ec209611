"""Secrets kept in the store sealed under a key derived from AUTH_SECRET, so a read of the database alone
does not reveal them (a webhook endpoint's signing secret: `jobstore.webhooks`).

A sealed value is `v1.<base64url of nonce | ciphertext | tag>`: the ciphertext is the secret XOR a stream of
HMAC-SHA256 blocks keyed by one derived key over the value's random 16-byte nonce and a block counter; the tag
is HMAC-SHA256 (cut to 16 bytes) under a second derived key over the nonce and the ciphertext. The standard
library's HMAC is all it needs. Unsealing under another AUTH_SECRET fails the tag: `SealBroken`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

VERSION = "v1"
NONCE_BYTES = 16
TAG_BYTES = 16
# The purpose labels the two keys are derived under, never used for anything else.
_CIPHER_PURPOSE = b"outbox-bridge/sealed-secret/v1/cipher"
_TAG_PURPOSE = b"outbox-bridge/sealed-secret/v1/tag"


class SealBroken(ValueError):
    """A sealed value that does not open under this AUTH_SECRET (another secret sealed it, or it was
    altered)."""


def hkdf_sha256(ikm: bytes, *, salt: bytes, info: bytes) -> bytes:
    """RFC 5869's HKDF with SHA-256, one block long (32 bytes); an empty salt is 32 zero bytes."""
    prk = hmac.new(salt or bytes(32), ikm, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


@dataclass(frozen=True)
class Sealer:
    """Seals and opens secrets under the keys derived from one AUTH_SECRET."""

    cipher_key: bytes = field(repr=False)
    tag_key: bytes = field(repr=False)

    @classmethod
    def of(cls, auth_secret: str) -> Sealer:
        ikm = auth_secret.encode()
        return cls(
            hkdf_sha256(ikm, salt=b"", info=_CIPHER_PURPOSE), hkdf_sha256(ikm, salt=b"", info=_TAG_PURPOSE)
        )

    def seal(self, secret: bytes) -> str:
        """`secret` sealed under a fresh nonce: two seals of one secret differ."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        body = nonce + _xor(secret, self._stream(nonce, len(secret)))
        sealed = body + self._tag(body)
        return f"{VERSION}.{base64.urlsafe_b64encode(sealed).decode('ascii')}"

    def open(self, sealed: str) -> bytes:
        """The secret `seal` sealed; `SealBroken` when this AUTH_SECRET did not seal it or it was altered."""
        version, _, text = sealed.partition(".")
        try:
            raw = base64.urlsafe_b64decode(text.encode("ascii"))
        except ValueError:
            raw = b""
        body, tag = raw[:-TAG_BYTES], raw[-TAG_BYTES:]
        if version != VERSION or len(body) < NONCE_BYTES or not hmac.compare_digest(tag, self._tag(body)):
            raise SealBroken("a sealed secret does not open under this AUTH_SECRET")
        nonce, ciphertext = body[:NONCE_BYTES], body[NONCE_BYTES:]
        return _xor(ciphertext, self._stream(nonce, len(ciphertext)))

    def _stream(self, nonce: bytes, length: int) -> bytes:
        blocks = (
            hmac.new(self.cipher_key, nonce + i.to_bytes(4, "big"), hashlib.sha256).digest()
            for i in range((length + 31) // 32)
        )
        return b"".join(blocks)[:length]

    def _tag(self, body: bytes) -> bytes:
        return hmac.new(self.tag_key, body, hashlib.sha256).digest()[:TAG_BYTES]


def _xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))
