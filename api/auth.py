"""Credentials -> Principal: API keys, stateless access tokens, and the Cartesia-Version.

Where a credential may arrive (protocol sections 1.2-1.3), first match wins:

    1. ``Authorization: Bearer <key or token>``   (scheme in any case; Python/JS 3.x-4.x)
    2. ``X-API-Key: <key>``                        (header name in any case; LiveKit, pipecat, 1.x/2.x)
    3. ``?api_key=<key>``                          (browser JS, Python 1.x/2.x WebSocket)
    4. ``?access_token=<token>``                   (browser JS with a token)

Keys and tokens both arrive as ``Bearer``, so every credential is looked up as a key first (in
constant time against the configured keys), then as an access token, then through the optional
async ``key_lookup`` hook (keys kept in Redis). The version comes from ``?cartesia_version=`` (wins)
or the ``Cartesia-Version`` header; any value is accepted and a missing one means the newest.

Access tokens (``POST /access-token``) are stateless, so every replica sharing the secret verifies
them without shared state::

    gat1.<base64url(JSON {"v":1,"grants":[...],"iat":s,"exp":s,"jti":hex,"sub":key id})>.<base64url(HMAC-SHA256)>

The MAC covers ``gat1.<payload>`` with the server's ``token_secret``. Tokens carry grants
(tts/stt/agent) and an expiry of 1-3600 s (default 60). Only an API key may mint one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass
from enum import Enum
from typing import Awaitable, Callable, Iterable, Mapping, Optional, Union

from starlette.requests import HTTPConnection

from api.errors import AuthBackendUnavailableError, AuthenticationError, BadRequestError, PermissionDeniedError

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TOKEN_EXPIRES_IN_S",
    "GRANT_NAMES",
    "MAX_TOKEN_EXPIRES_IN_S",
    "NEWEST_CARTESIA_VERSION",
    "Authenticator",
    "Grants",
    "KeyLookup",
    "Principal",
    "PrincipalKind",
    "TokenClaims",
]

#: The version SDK 4.2.0 sends; what a request without one is treated as.
NEWEST_CARTESIA_VERSION = "2026-08-14"
GRANT_NAMES = ("tts", "stt", "agent")
DEFAULT_TOKEN_EXPIRES_IN_S = 60
MAX_TOKEN_EXPIRES_IN_S = 3600
TOKEN_PREFIX = "gat1."

KeyLookup = Callable[[str], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Grants:
    """What a credential may do. API keys and anonymous principals have every grant."""

    tts: bool = False
    stt: bool = False
    agent: bool = False

    @classmethod
    def all(cls) -> "Grants":
        return cls(True, True, True)

    @classmethod
    def from_names(cls, names: Iterable[str]) -> "Grants":
        names = set(names)
        unknown = names - set(GRANT_NAMES)
        if unknown:
            raise ValueError(f"unknown grants {sorted(unknown)}; expected some of {', '.join(GRANT_NAMES)}")
        return cls(**{name: name in names for name in GRANT_NAMES})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name in GRANT_NAMES if getattr(self, name))

    def allows(self, grant: str) -> bool:
        if grant not in GRANT_NAMES:
            raise ValueError(f"unknown grant {grant!r}; expected one of {', '.join(GRANT_NAMES)}")
        return bool(getattr(self, grant))


class PrincipalKind(str, Enum):
    API_KEY = "api_key"
    ACCESS_TOKEN = "access_token"
    ANONYMOUS = "anonymous"  # authentication is disabled


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling.

    credential_id: a non-secret id for logs and per-client limits: ``key:<8 hex of sha256>``,
        ``token:<jti>`` or ``anonymous``.
    subject: for a token, the credential_id of the key that minted it; else credential_id.
    expires_at: Unix seconds when a token expires; None otherwise.
    """

    kind: PrincipalKind
    grants: Grants
    credential_id: str
    subject: str
    cartesia_version: str = NEWEST_CARTESIA_VERSION
    expires_at: Optional[float] = None

    @property
    def is_anonymous(self) -> bool:
        return self.kind is PrincipalKind.ANONYMOUS

    def require(self, grant: str) -> None:
        """Raise PermissionDeniedError unless this principal has ``grant``."""
        if not self.grants.allows(grant):
            raise PermissionDeniedError(
                f"this access token does not grant {grant!r} (it grants: {', '.join(self.grants.names) or 'nothing'})",
                error_code="missing_grant",
            )

    def require_api_key(self, action: str) -> None:
        """Raise PermissionDeniedError when an access token tries ``action`` (keys only)."""
        if self.kind is PrincipalKind.ACCESS_TOKEN:
            raise PermissionDeniedError(f"an access token cannot be used to {action}; use an API key")


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """The verified contents of an access token (times are Unix seconds)."""

    grants: Grants
    issued_at: int
    expires_at: int
    token_id: str
    subject: str


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_id(key: str) -> str:
    """A non-secret, stable id for an API key: ``key:`` + 8 hex digits of its SHA-256."""
    return "key:" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]


class Authenticator:
    """Turns a request's or WebSocket's credential into a Principal.

    api_keys: the accepted keys (compared in constant time, never logged).
    token_secret: HMAC key for access tokens; replicas that share it accept each other's tokens.
    require_auth: False makes every request an anonymous principal with all grants.
    key_lookup: optional ``async (key) -> bool`` consulted for credentials that are neither a
        configured key nor a token (e.g. keys stored in Redis); its exceptions become 503.
    clock: ``() -> Unix seconds``, replaceable in tests.
    """

    def __init__(
        self,
        api_keys: Iterable[str],
        token_secret: bytes,
        require_auth: bool = True,
        key_lookup: Optional[KeyLookup] = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(token_secret, (bytes, bytearray)) or len(token_secret) < 16:
            raise ValueError("token_secret must be at least 16 bytes")
        keys = [k for k in api_keys if k]
        self._key_digests = tuple(hashlib.sha256(k.encode("utf-8")).digest() for k in keys)
        self._secret = bytes(token_secret)
        self.require_auth = require_auth
        self._key_lookup = key_lookup
        self._clock = clock
        if not require_auth:
            logger.warning(
                "authentication is disabled: every request is served as anonymous (set API keys to enable it)"
            )
        elif not keys and key_lookup is None:
            logger.warning("authentication is required but no API keys are configured: no request can authenticate")
        logger.debug("authenticator: %d static keys, key_lookup=%s", len(keys), key_lookup is not None)

    # -- credentials -------------------------------------------------------------------------

    @staticmethod
    def cartesia_version(conn: HTTPConnection) -> str:
        """``?cartesia_version=`` wins over the ``Cartesia-Version`` header; missing -> newest."""
        value = conn.query_params.get("cartesia_version") or conn.headers.get("cartesia-version") or ""
        return value.strip() or NEWEST_CARTESIA_VERSION

    @staticmethod
    def extract_credential(conn: HTTPConnection) -> Optional[str]:
        """The credential by precedence (module docstring); None when there is none.

        Raises AuthenticationError for an ``Authorization`` header that is not ``Bearer <x>``
        when no other credential is present.
        """
        bad_authorization: Optional[str] = None
        authorization = conn.headers.get("authorization")
        if authorization is not None:
            scheme, _, value = authorization.strip().partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                return value.strip()
            bad_authorization = (
                "the Authorization header must be 'Bearer <api key or access token>'"
                if scheme.lower() != "bearer"
                else "the Authorization header has an empty Bearer credential"
            )
        for value in (
            conn.headers.get("x-api-key"),
            conn.query_params.get("api_key"),
            conn.query_params.get("access_token"),
        ):
            if value is not None and value.strip():
                return value.strip()
        if bad_authorization:
            raise AuthenticationError(bad_authorization, error_code="invalid_credentials")
        return None

    def _is_static_key(self, credential: str) -> bool:
        digest = hashlib.sha256(credential.encode("utf-8")).digest()
        found = False
        for known in self._key_digests:  # no early exit: the time taken does not depend on which key matched
            found |= hmac.compare_digest(digest, known)
        return found

    async def authenticate(self, conn: HTTPConnection, *, required_grant: Optional[str] = "tts") -> Principal:
        """The Principal behind a Request or WebSocket (before ``accept()``).

        required_grant: checked for access tokens (keys have every grant); None skips the check.
        Raises AuthenticationError (401), PermissionDeniedError (403) or
        AuthBackendUnavailableError (503, key_lookup failed).
        """
        version = self.cartesia_version(conn)
        if not self.require_auth:
            return Principal(PrincipalKind.ANONYMOUS, Grants.all(), "anonymous", "anonymous", version)
        credential = self.extract_credential(conn)
        if credential is None:
            raise AuthenticationError(
                "missing credentials: send 'Authorization: Bearer <api key>', 'X-API-Key: <api key>', "
                "or ?api_key= / ?access_token= in the URL",
                error_code="missing_credentials",
            )
        principal = await self.principal_for(credential, version)
        if required_grant is not None:
            principal.require(required_grant)
        return principal

    async def principal_for(self, credential: str, cartesia_version: str = NEWEST_CARTESIA_VERSION) -> Principal:
        """Look one credential up: configured keys, then tokens, then ``key_lookup``."""
        if self._is_static_key(credential):
            cid = key_id(credential)
            return Principal(PrincipalKind.API_KEY, Grants.all(), cid, cid, cartesia_version)
        if credential.startswith(TOKEN_PREFIX):
            claims = self.verify_token(credential)
            return Principal(
                PrincipalKind.ACCESS_TOKEN,
                claims.grants,
                f"token:{claims.token_id}",
                claims.subject,
                cartesia_version,
                float(claims.expires_at),
            )
        if self._key_lookup is not None:
            try:
                known = await self._key_lookup(credential)
            except Exception as exc:
                logger.warning("API key lookup failed: %s: %s", type(exc).__name__, exc)
                raise AuthBackendUnavailableError("the API key store cannot be reached; retry shortly") from exc
            if known:
                cid = key_id(credential)
                return Principal(PrincipalKind.API_KEY, Grants.all(), cid, cid, cartesia_version)
        raise AuthenticationError("invalid API key or access token", error_code="invalid_credentials")

    # -- access tokens -----------------------------------------------------------------------

    def _sign(self, signed_part: str) -> bytes:
        return hmac.new(self._secret, signed_part.encode("ascii"), hashlib.sha256).digest()

    def mint_token(
        self,
        grants: Union[Grants, Mapping[str, bool], None] = None,
        expires_in: Optional[int] = None,
        *,
        subject: str = "anonymous",
    ) -> str:
        """A new access token. ``grants`` None means tts only; ``expires_in`` seconds, 1..3600
        (None: 60). Raises BadRequestError naming the field for anything else."""
        if grants is None:
            grants = Grants(tts=True)
        elif not isinstance(grants, Grants):
            unknown = set(grants) - set(GRANT_NAMES)
            if unknown:
                raise BadRequestError(
                    f"grants: unknown grant {sorted(unknown)[0]!r}; expected some of {', '.join(GRANT_NAMES)}"
                )
            grants = Grants(**{name: bool(grants.get(name, False)) for name in GRANT_NAMES})
        if expires_in is None:
            expires_in = DEFAULT_TOKEN_EXPIRES_IN_S
        if isinstance(expires_in, bool) or not isinstance(expires_in, int):
            raise BadRequestError(f"expires_in: expected an integer number of seconds, got {expires_in!r}")
        if not 1 <= expires_in <= MAX_TOKEN_EXPIRES_IN_S:
            raise BadRequestError(
                f"expires_in: must be between 1 and {MAX_TOKEN_EXPIRES_IN_S} seconds, got {expires_in}"
            )
        now = int(self._clock())
        claims = {
            "v": 1,
            "grants": list(grants.names),
            "iat": now,
            "exp": now + expires_in,
            "jti": secrets.token_hex(8),
            "sub": subject,
        }
        payload = _b64encode(json.dumps(claims, separators=(",", ":")).encode("utf-8"))
        signed = TOKEN_PREFIX + payload
        return f"{signed}.{_b64encode(self._sign(signed))}"

    def issue_token(
        self,
        principal: Principal,
        grants: Union[Grants, Mapping[str, bool], None] = None,
        expires_in: Optional[int] = None,
    ) -> str:
        """``POST /access-token``: mint for ``principal``, which must not itself be a token."""
        principal.require_api_key("mint access tokens")
        token = self.mint_token(grants, expires_in, subject=principal.subject)
        logger.info("access token issued for %s", principal.credential_id)
        return token

    def verify_token(self, token: str) -> TokenClaims:
        """Check the MAC and expiry; raises AuthenticationError saying which check failed."""
        invalid = AuthenticationError(
            "invalid access token (malformed, tampered with, or signed by a server with another secret)",
            error_code="invalid_token",
        )
        if not token.isascii() or not token.startswith(TOKEN_PREFIX) or token.count(".") != 2:
            raise invalid
        signed, _, signature = token.rpartition(".")
        try:
            given = _b64decode(signature)
        except (binascii.Error, ValueError):
            raise invalid from None
        if not hmac.compare_digest(given, self._sign(signed)):
            raise invalid
        try:
            claims = json.loads(_b64decode(signed[len(TOKEN_PREFIX):]))
            grants = Grants.from_names(claims["grants"])
            issued_at, expires_at = int(claims["iat"]), int(claims["exp"])
            token_id, subject = str(claims["jti"]), str(claims.get("sub", "anonymous"))
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise invalid from None
        if self._clock() >= expires_at:
            raise AuthenticationError("access token has expired; mint a new one", error_code="token_expired")
        return TokenClaims(grants, issued_at, expires_at, token_id, subject)
