"""Credentials -> Principal: API keys, stateless access tokens, and the Cartesia-Version.

Where a credential may arrive (protocol sections 1.2-1.3), first match wins:

    1. ``Authorization: Bearer <key or token>``   (scheme in any case; Python/JS 3.x-4.x)
    2. ``X-API-Key: <key>``                        (header name in any case; LiveKit, pipecat, 1.x/2.x)
    3. ``?api_key=<key>``                          (browser JS, Python 1.x/2.x WebSocket)
    4. ``?access_token=<token>``                   (browser JS with a token)

The version comes from ``?cartesia_version=`` (wins) or the ``Cartesia-Version`` header; any
value is accepted and a missing one means the newest.

How a credential is answered, in order. Only the last step needs the key store (Redis), so a
Redis outage costs exactly the answers that cannot be given without it:

    1. a configured key (``GEPARD_API_KEYS``; constant-time compare)      -> the key's principal
    2. ``gat1.`` + anything: an access token. Bad MAC, malformed, expired -> 401 invalid_token /
       token_expired (no Redis). A good MAC: its minting key must still be live (below).
    3. shorter than MIN_LOOKUP_KEY_CHARS (16; the store refuses shorter keys, so it cannot hold
       it), or no key store configured                                     -> 401 invalid_credentials
    4. ``key_lookup(sha256 hex)`` (the Redis set of ``gepard keys add``)   -> known: the key's
       principal; unknown: 401 invalid_credentials; the store unreachable: 503 auth_unavailable
       (retryable: the key may well be valid).

Access tokens (``POST /access-token``) are stateless, so every replica sharing the secret verifies
them without shared state::

    gat1.<base64url(JSON {"v":2,"grants":[...],"iat":s,"exp":s,"jti":hex,"kid":hex|null})>.<base64url(HMAC-SHA256)>

The MAC covers ``gat1.<payload>`` with the server's ``token_secret``. Tokens carry grants
(tts/stt/agent) and an expiry of 1-3600 s (default 60). Only an API key may mint one.

Revocation: ``kid`` names the minting key, so removing a key revokes its tokens. It is the key's
SHA-256 (the digest the Redis store keeps), masked with ``HMAC(token_secret, jti)`` so that a
token handed to a browser is no offline oracle for guessing its key. A token is accepted only
while its key is live: a configured key (in memory), or a member of the Redis set. A key found
live in Redis is remembered for ``key_cache_ttl_s`` (default 2 s), so a hot key or token costs
one Redis round trip per that interval, and **a removed key (and every token it minted) stops
working within key_cache_ttl_s** on every replica. With Redis down, a token whose key is a
configured key is still answered; one whose key lives only in Redis gets 503 once its cache
entry lapses (the store cannot be asked, and accepting it could serve a revoked key).
A configured key removed from ``GEPARD_API_KEYS`` stops (with its tokens) when the replica
restarts without it. So a replica accepts a token only if it knows the token's key (configured
there, or in the shared Redis): replicas sharing the secret but not the key reject it (token_revoked). Tokens minted while authentication is off (anonymous) have ``kid: null``:
they name no key, so a server that requires authentication rejects them (invalid_token).
Tokens of the earlier format (``"v":1``, no ``kid``) are rejected (invalid_token): mint new ones.

Long-lived connections: a WebSocket authenticates once, at the upgrade, and keeps its Principal.
``Authenticator.recheck(principal)`` asks again what a new request with that credential would get
(expiry, then whether its key is still live, through the same cache), so the socket re-checks at
every new context and a removed key or an expired token opens nothing new there either.
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
from dataclasses import dataclass, field
from enum import Enum
from typing import Awaitable, Callable, Iterable, Mapping, Optional, Union

from starlette.requests import HTTPConnection

from api.errors import AuthBackendUnavailableError, AuthenticationError, BadRequestError, PermissionDeniedError

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_KEY_CACHE_TTL_S",
    "DEFAULT_TOKEN_EXPIRES_IN_S",
    "GRANT_NAMES",
    "MAX_TOKEN_EXPIRES_IN_S",
    "MIN_LOOKUP_KEY_CHARS",
    "NEWEST_CARTESIA_VERSION",
    "Authenticator",
    "Grants",
    "KeyLookup",
    "Principal",
    "PrincipalKind",
    "TokenClaims",
    "check_metrics_token",
    "key_digest",
    "key_id",
]

#: The version SDK 4.2.0 sends; what a request without one is treated as.
NEWEST_CARTESIA_VERSION = "2026-08-14"
GRANT_NAMES = ("tts", "stt", "agent")
DEFAULT_TOKEN_EXPIRES_IN_S = 60
MAX_TOKEN_EXPIRES_IN_S = 3600
TOKEN_PREFIX = "gat1."
MAX_TOKEN_CHARS = 4096  # ours are ~300; longer is refused before any decoding
TOKEN_VERSION = 2  # 2: "kid" names the minting key (1 had none and is no longer accepted)
#: Keys kept outside the configuration (Redis) are at least this long (RedisKeyStore.add refuses
#: shorter ones), so a shorter credential is answered 401 without asking the store.
MIN_LOOKUP_KEY_CHARS = 16
#: How long a key found live in the key store is believed without asking again (the revocation bound).
DEFAULT_KEY_CACHE_TTL_S = 2.0
_KEY_CACHE_MAX_ENTRIES = 10_000
_KID_MASK_LABEL = b"gepard-token-kid:"

#: ``async (sha256 hex digest of a key) -> bool``: is that key in the store? Never sees the key itself.
KeyLookup = Callable[[str], Awaitable[bool]]


# The answers a credential that was good can turn into later; one wording for the upgrade or request
# that checks it first and for the re-check of a connection that outlived it (Authenticator.recheck).
def _token_expired() -> AuthenticationError:
    return AuthenticationError("access token has expired; mint a new one", error_code="token_expired")


def _token_revoked() -> AuthenticationError:
    return AuthenticationError(
        "the API key that minted this access token has been removed, which revokes its tokens; "
        "mint a new one with a current key",
        error_code="token_revoked",
    )


def _invalid_credentials() -> AuthenticationError:
    return AuthenticationError("invalid API key or access token", error_code="invalid_credentials")


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
    key_digest: SHA-256 hex of the API key behind this principal (a token's minting key); None
        when anonymous. Tokens minted for this principal name it, so removing the key revokes them.
    """

    kind: PrincipalKind
    grants: Grants
    credential_id: str
    subject: str
    cartesia_version: str = NEWEST_CARTESIA_VERSION
    expires_at: Optional[float] = None
    key_digest: Optional[str] = field(default=None, repr=False)

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
    """The verified contents of an access token (times are Unix seconds).

    key_digest: SHA-256 hex of the key that minted it; None for a token minted anonymously.
    """

    grants: Grants
    issued_at: int
    expires_at: int
    token_id: str
    key_digest: Optional[str]

    @property
    def subject(self) -> str:
        """The minting key's credential_id (``key:<8 hex>``), or ``anonymous``."""
        return _key_id_of_digest(self.key_digest) if self.key_digest else "anonymous"


def check_metrics_token(conn: HTTPConnection, token: str) -> None:
    """AuthenticationError (401 invalid_credentials) unless ``conn`` carries ``Authorization: Bearer
    <token>``: the credential Prometheus sends with a scrape job's ``authorization``. Not an API key:
    a customer's key does not open the operator's metrics, and the token opens nothing else."""
    scheme, _, value = (conn.headers.get("authorization") or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise AuthenticationError("GET /metrics needs 'Authorization: Bearer <GEPARD_METRICS_TOKEN>'",
                                  error_code="invalid_credentials")
    if not hmac.compare_digest(value.strip().encode("utf-8"), token.encode("utf-8")):
        raise AuthenticationError("the metrics token does not match GEPARD_METRICS_TOKEN",
                                  error_code="invalid_credentials")


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_digest(key: str) -> str:
    """SHA-256 hex of a key: how the Redis store keeps keys, and what tokens name (masked)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _key_id_of_digest(digest_hex: str) -> str:
    return "key:" + digest_hex[:8]


def key_id(key: str) -> str:
    """A non-secret, stable id for an API key: ``key:`` + 8 hex digits of its SHA-256."""
    return _key_id_of_digest(key_digest(key))


class _LiveKeyCache:
    """Digests of keys the store said were live, each believed until ``ttl_s`` after the answer.

    Only positive answers are kept: a key added with ``gepard keys add`` works at once, a removed
    one stops within ``ttl_s``. Bounded: when full, expired entries go, and if none had, all go.
    """

    def __init__(self, ttl_s: float, clock: Callable[[], float]) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._until: dict[str, float] = {}

    def __contains__(self, digest: str) -> bool:
        until = self._until.get(digest)
        if until is None:
            return False
        if self._clock() < until:
            return True
        del self._until[digest]
        return False

    def add(self, digest: str) -> None:
        if self.ttl_s <= 0:
            return
        now = self._clock()
        if len(self._until) >= _KEY_CACHE_MAX_ENTRIES:
            self._until = {d: t for d, t in self._until.items() if t > now}
            if len(self._until) >= _KEY_CACHE_MAX_ENTRIES:
                self._until.clear()
        self._until[digest] = now + self.ttl_s


class Authenticator:
    """Turns a request's or WebSocket's credential into a Principal (rules: module docstring).

    api_keys: the configured keys (compared in constant time, never logged).
    token_secret: HMAC key for access tokens; replicas that share it accept each other's tokens.
    require_auth: False makes every request an anonymous principal with all grants.
    key_lookup: optional ``async (sha256 hex) -> bool``: is this key in the store (Redis)? Asked
        for credentials of at least MIN_LOOKUP_KEY_CHARS that are neither a configured key nor a
        token, and for a token whose key is not configured; its exceptions become 503.
    key_cache_ttl_s: how long a key the store said was live is believed (0: ask every time);
        the bound on how long a removed key and its tokens keep working.
    clock: ``() -> Unix seconds`` (token times); monotonic: ``() -> seconds`` (the cache);
        both replaceable in tests.
    """

    def __init__(
        self,
        api_keys: Iterable[str],
        token_secret: bytes,
        require_auth: bool = True,
        key_lookup: Optional[KeyLookup] = None,
        clock: Callable[[], float] = time.time,
        *,
        key_cache_ttl_s: float = DEFAULT_KEY_CACHE_TTL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(token_secret, (bytes, bytearray)) or len(token_secret) < 16:
            raise ValueError("token_secret must be at least 16 bytes")
        if key_cache_ttl_s < 0:
            raise ValueError("key_cache_ttl_s must be >= 0")
        keys = [k for k in api_keys if k]
        self._key_digests = tuple(hashlib.sha256(k.encode("utf-8")).digest() for k in keys)
        self._static_hex = frozenset(d.hex() for d in self._key_digests)
        self._secret = bytes(token_secret)
        self.require_auth = require_auth
        self._key_lookup = key_lookup
        self._clock = clock
        self._live = _LiveKeyCache(key_cache_ttl_s, monotonic)
        if not require_auth:
            logger.warning(
                "authentication is disabled: every request is served as anonymous (set API keys to enable it)"
            )
        elif not keys and key_lookup is None:
            logger.warning("authentication is required but no API keys are configured: no request can authenticate")
        logger.debug("authenticator: %d static keys, key_lookup=%s, key cache %.1f s", len(keys),
                     key_lookup is not None, key_cache_ttl_s)

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

    def _is_static_digest(self, digest: bytes) -> bool:
        found = False
        for known in self._key_digests:  # no early exit: the time taken does not depend on which key matched
            found |= hmac.compare_digest(digest, known)
        return found

    async def authenticate(self, conn: HTTPConnection, *, required_grant: Optional[str] = "tts") -> Principal:
        """The Principal behind a Request or WebSocket (before ``accept()``).

        required_grant: checked for access tokens (keys have every grant); None skips the check.
        Raises AuthenticationError (401), PermissionDeniedError (403) or
        AuthBackendUnavailableError (503: the key store was needed and could not be reached).
        """
        version = self.cartesia_version(conn)
        if not self.require_auth:
            conn.state.credential_id = "anonymous"
            return Principal(PrincipalKind.ANONYMOUS, Grants.all(), "anonymous", "anonymous", version)
        credential = self.extract_credential(conn)
        if credential is None:
            raise AuthenticationError(
                "missing credentials: send 'Authorization: Bearer <api key>', 'X-API-Key: <api key>', "
                "or ?api_key= / ?access_token= in the URL",
                error_code="missing_credentials",
            )
        principal = await self.principal_for(credential, version)
        # the access log line names who called (api/access_log.py), never the credential itself
        conn.state.credential_id = principal.credential_id
        if required_grant is not None:
            principal.require(required_grant)
        return principal

    async def principal_for(self, credential: str, cartesia_version: str = NEWEST_CARTESIA_VERSION) -> Principal:
        """Look one credential up, in the order of the module docstring."""
        raw_digest = hashlib.sha256(credential.encode("utf-8")).digest()
        if self._is_static_digest(raw_digest):
            return self._key_principal(raw_digest.hex(), cartesia_version)
        if credential.startswith(TOKEN_PREFIX):
            claims = self.verify_token(credential)
            if claims.key_digest is None:
                raise AuthenticationError(
                    "this access token was minted while authentication was off, so it names no API key; "
                    "mint a new one with an API key",
                    error_code="invalid_token",
                )
            if not await self._key_is_live(claims.key_digest):
                raise _token_revoked()
            return Principal(
                PrincipalKind.ACCESS_TOKEN,
                claims.grants,
                f"token:{claims.token_id}",
                claims.subject,
                cartesia_version,
                float(claims.expires_at),
                claims.key_digest,
            )
        if len(credential) >= MIN_LOOKUP_KEY_CHARS and await self._key_is_live(raw_digest.hex()):
            return self._key_principal(raw_digest.hex(), cartesia_version)
        raise _invalid_credentials()

    async def recheck(self, principal: Principal) -> None:
        """Raise what a new request with ``principal``'s credential would get now, for a connection
        that authenticated once and outlives its credential: token_expired, token_revoked (a
        token's key was removed), invalid_credentials (the key itself was removed), or
        AuthBackendUnavailableError (only the store could tell, and it cannot be reached).

        As cheap as a request's check: a configured key is in memory and a stored one is believed
        for key_cache_ttl_s, so this bounds the credential's life on the connection the same way.
        """
        if principal.key_digest is None:  # anonymous: authentication is off
            return
        if principal.expires_at is not None and self._clock() >= principal.expires_at:
            raise _token_expired()
        if not await self._key_is_live(principal.key_digest):
            raise _token_revoked() if principal.kind is PrincipalKind.ACCESS_TOKEN else _invalid_credentials()

    @staticmethod
    def _key_principal(digest_hex: str, cartesia_version: str) -> Principal:
        cid = _key_id_of_digest(digest_hex)
        return Principal(PrincipalKind.API_KEY, Grants.all(), cid, cid, cartesia_version, None, digest_hex)

    async def _key_is_live(self, digest_hex: str) -> bool:
        """A configured key, or one the store knows (believed for key_cache_ttl_s); raises
        AuthBackendUnavailableError when only the store could tell and it cannot be reached."""
        if digest_hex in self._static_hex or digest_hex in self._live:
            return True
        if self._key_lookup is None:
            return False
        try:
            known = await self._key_lookup(digest_hex)
        except Exception as exc:
            logger.warning("API key lookup failed: %s: %s", type(exc).__name__, exc)
            raise AuthBackendUnavailableError("the API key store cannot be reached; retry shortly") from exc
        if known:
            self._live.add(digest_hex)
        return bool(known)

    # -- access tokens -----------------------------------------------------------------------

    def _sign(self, signed_part: str) -> bytes:
        return hmac.new(self._secret, signed_part.encode("ascii"), hashlib.sha256).digest()

    def _kid_mask(self, token_id: str) -> bytes:
        # a per-token pad (jti is random): the digest is unreadable without the secret, and the
        # token's MAC already guarantees it was not altered
        return hmac.new(self._secret, _KID_MASK_LABEL + token_id.encode("ascii"), hashlib.sha256).digest()

    def mint_token(
        self,
        grants: Union[Grants, Mapping[str, bool], None] = None,
        expires_in: Optional[int] = None,
        *,
        key_digest: Optional[str] = None,
    ) -> str:
        """A new access token. ``grants`` None means tts only; ``expires_in`` seconds, 1..3600
        (None: 60); ``key_digest``: SHA-256 hex of the minting key (None: anonymous, which a
        server requiring authentication rejects). Raises BadRequestError naming the field."""
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
        token_id = secrets.token_hex(8)
        kid = None
        if key_digest is not None:
            digest = bytes.fromhex(key_digest)
            if len(digest) != 32:
                raise ValueError("key_digest must be a SHA-256 hex digest")
            kid = bytes(a ^ b for a, b in zip(digest, self._kid_mask(token_id))).hex()
        claims = {
            "v": TOKEN_VERSION,
            "grants": list(grants.names),
            "iat": now,
            "exp": now + expires_in,
            "jti": token_id,
            "kid": kid,
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
        token = self.mint_token(grants, expires_in, key_digest=principal.key_digest)
        logger.info("access token issued for %s", principal.credential_id)
        return token

    def verify_token(self, token: str) -> TokenClaims:
        """Check the MAC, format and expiry (not whether the key is still live: principal_for
        does that); raises AuthenticationError saying which check failed."""
        invalid = AuthenticationError(
            "invalid access token (malformed, tampered with, or signed by a server with another secret)",
            error_code="invalid_token",
        )
        if (len(token) > MAX_TOKEN_CHARS or not token.isascii() or not token.startswith(TOKEN_PREFIX)
                or token.count(".") != 2):
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
            version = claims.get("v")
            grants = Grants.from_names(claims["grants"])
            issued_at, expires_at = int(claims["iat"]), int(claims["exp"])
            token_id = str(claims["jti"])
            kid = claims["kid"] if version == TOKEN_VERSION else None
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, OverflowError, RecursionError):
            # a valid MAC over claims we never mint (only a leaked secret makes one): 1e400 or
            # Infinity in a time overflows int(), deep nesting exhausts json's recursion
            raise invalid from None
        if version != TOKEN_VERSION:
            raise AuthenticationError(
                "this access token is of an older format that cannot be revoked; mint a new one",
                error_code="invalid_token",
            )
        if self._clock() >= expires_at:
            raise _token_expired()
        digest: Optional[str] = None
        if kid is not None:
            try:
                masked = bytes.fromhex(kid) if isinstance(kid, str) else b""
            except ValueError:
                raise invalid from None
            if len(masked) != 32 or not token_id.isascii():
                raise invalid
            digest = bytes(a ^ b for a, b in zip(masked, self._kid_mask(token_id))).hex()
        return TokenClaims(grants, issued_at, expires_at, token_id, digest)
