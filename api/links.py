"""Signed result links: `/jobs/{id}/result?expires=<unix seconds>&sig=<signature>` serves a job's committed
result without a bearer token until `expires`.

The signature is HMAC-SHA256, base64url without padding, over the job id, its tenant, the attempt its result
pointer names and the expiry. Its key is derived from AUTH_SECRET under a purpose label of its own, so it is
never the key that signs bearer tokens and neither can stand in for the other. A link therefore opens one
result of one job of one tenant, and only while that attempt is the job's result."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
from dataclasses import dataclass, field

from outbox_bridge.core.sealing import hkdf_sha256
from outbox_bridge.core.settings import Settings

# The purpose label the link key is derived under; a new label (or version) invalidates every link.
PURPOSE = b"outbox-bridge/result-link/v1"
# An expiry as the signer writes it: unix seconds in decimal, no sign, no leading zero.
_EXPIRES = re.compile(r"[1-9][0-9]{0,11}", re.ASCII)
# A signature is 43 characters; anything much longer is not one and is not compared.
MAX_SIG_CHARS = 128


class LinkRefused(Exception):
    """The link does not open this result; the message says why, in words fit for the client."""


class LinkInvalid(LinkRefused):
    """Not a link signed for this job's result: an altered id, expiry or signature, or a part missing."""


class LinkExpired(LinkRefused):
    """The link was signed for this result, but its time has passed."""


@dataclass(frozen=True)
class ResultLink:
    """Where a result is, and until when (unix seconds) that URL opens it; None: it takes a bearer token."""

    url: str
    expires: int | None


@dataclass(frozen=True)
class LinkSigner:
    """Signs and checks result links with `key`; a link it signs is valid for `valid_seconds`."""

    key: bytes = field(repr=False)
    valid_seconds: int

    @classmethod
    def of(cls, settings: Settings) -> LinkSigner:
        return cls(derive_key(settings.auth_secret), settings.result_link_seconds)

    def link(self, job_id: str, tenant: str, attempt_id: str, now: float) -> ResultLink:
        """A link to the result `attempt_id` is for job `job_id` of `tenant`, valid from `now` for
        `valid_seconds` (rounded down to a whole second)."""
        expires = math.floor(now) + self.valid_seconds
        sig = self._sign(job_id, tenant, attempt_id, expires)
        return ResultLink(f"/jobs/{job_id}/result?expires={expires}&sig={sig}", expires)

    def check(
        self,
        job_id: str,
        tenant: str,
        attempt_id: str | None,
        *,
        expires: str | None,
        sig: str | None,
        now: float,
    ) -> None:
        """Return when `expires` and `sig` are a link this signer made for the result `attempt_id` of job
        `job_id` of `tenant`, and `now` is before its expiry. `LinkInvalid` for anything else it did not
        sign (no result attempt, a part missing or altered); `LinkExpired`, only once the signature holds,
        when its time has passed."""
        if attempt_id is None or expires is None or sig is None or not _EXPIRES.fullmatch(expires):
            raise LinkInvalid("it is incomplete or altered")
        if len(sig) > MAX_SIG_CHARS or not hmac.compare_digest(
            self._sign(job_id, tenant, attempt_id, int(expires)).encode(), sig.encode("utf-8", "replace")
        ):
            raise LinkInvalid("its signature does not match")
        if now >= int(expires):
            raise LinkExpired("its time has passed")

    def _sign(self, job_id: str, tenant: str, attempt_id: str, expires: int) -> str:
        # A JSON array, so no choice of the parts can make two different links sign the same bytes.
        message = json.dumps([job_id, tenant, attempt_id, expires], separators=(",", ":")).encode()
        digest = hmac.new(self.key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def derive_key(secret: str) -> bytes:
    """The link key: HKDF-SHA256 (RFC 5869) of AUTH_SECRET with the `PURPOSE` label as its info; never the
    secret itself, and no other use of the secret derives the same key."""
    return hkdf_sha256(secret.encode(), salt=b"", info=PURPOSE)
