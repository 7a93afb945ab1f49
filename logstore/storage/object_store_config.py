"""Object-store URIs and options, parsed once into what obstore takes.

A URI names a bucket (or container) and a key prefix::

    s3://bucket/prefix     (s3a:// is the same thing: Hadoop's name for it)
    gs://bucket/prefix
    az://container/prefix  (also azure://, abfs://, abfss://; the account comes from
                            AZURE_STORAGE_ACCOUNT_NAME or the ``account_name`` option)
    memory://name          (one in-process store per name, for tests)

Options are obstore's config keys, case-insensitive, with or without the provider prefix
(``aws_endpoint``, ``endpoint``, ``AWS_ENDPOINT_URL``, ``aws_region``, ``region``,
``aws_access_key_id``...), its HTTP client keys (``allow_http``, ``connect_timeout``,
``timeout``, ``proxy_url``...; ``aws_allow_http``/``AWS_ALLOW_HTTP`` too), and seglog's
retry keys (``max_retries``, ``retry_timeout``, ``init_backoff``, ``max_backoff``). An
option overrides the environment variable of the same meaning. docs/object-storage.md
lists them.

``StorageOptions`` is how options travel (to Spark executors, into cache keys): a
hashable, picklable value whose ``repr`` and ``redact`` hide every value that may be a
secret, so credentials never reach a log line or an error message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError, InvalidStorageUriError
from .durations import parse_duration_ms

OBJECT_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "azure", "memory")
_PROVIDER_PREFIXES = ("aws_", "google_", "azure_")
_ENV_PREFIX = {"s3": "AWS_", "s3a": "AWS_", "gs": "GOOGLE_", "az": "AZURE_", "abfs": "AZURE_",
               "abfss": "AZURE_", "azure": "AZURE_"}

# obstore's ClientConfig keys: passed to client_options, never in a store's config (an
# obstore 0.12 S3 config holding one of them panics when converted back to Python).
CLIENT_KEYS = frozenset({
    "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type",
    "http1_only", "http2_only", "http2_keep_alive_interval", "http2_keep_alive_timeout",
    "http2_keep_alive_while_idle", "pool_idle_timeout", "pool_max_idle_per_host",
    "proxy_url", "proxy_ca_certificate", "proxy_excludes", "randomize_addresses",
    "read_timeout", "timeout", "user_agent",
})

# Bounded by default: with obstore's own defaults a silent endpoint (one that accepts and
# never answers) costs 30 s per attempt and retries for 3 minutes, which looks like a hang.
# A stall is caught by read_timeout (reset by every read, so a 1 GiB segment still
# downloads); timeout only bounds a whole request. Real stores still get retries for
# 5xx/SlowDown.
DEFAULT_CLIENT = {"connect_timeout": "5s", "read_timeout": "15s", "timeout": "10min"}
DEFAULT_MAX_RETRIES = 4
DEFAULT_RETRY_TIMEOUT = timedelta(seconds=30)
DEFAULT_INIT_BACKOFF = timedelta(milliseconds=100)
DEFAULT_MAX_BACKOFF = timedelta(seconds=5)
RETRY_KEYS = ("max_retries", "retry_timeout", "init_backoff", "max_backoff")

# Options whose values are shown in reprs and messages; every other value (keys, secrets,
# tokens, SAS, service-account JSON, and names nobody listed here) is redacted. A list of
# what is safe rather than of what is secret: a provider's new credential key is then
# hidden by default.
PUBLIC_KEYS = frozenset({
    "endpoint", "endpoint_url", "region", "default_region", "bucket", "bucket_name",
    "virtual_hosted_style_request", "conditional_put", "s3_express", "unsigned_payload",
    "skip_signature", "checksum_algorithm", "imdsv1_fallback", "metadata_endpoint",
    "request_payer", "disable_tagging", "account_name", "storage_account_name",
    "container_name", "use_emulator", "use_fabric_endpoint", "use_azure_cli",
}) | CLIENT_KEYS | frozenset(RETRY_KEYS)
REDACTED = "***"

_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_OTHER_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,221}")
# The client keys that are durations: parsed by seglog's one duration syntax
# (``durations``), handed to the client in milliseconds.
_CLIENT_DURATIONS = frozenset({"connect_timeout", "read_timeout", "timeout", "pool_idle_timeout",
                               "http2_keep_alive_interval", "http2_keep_alive_timeout"})


# Characters that continue a word, a name or a token: a match of a secret next to one of
# them is part of something longer, not the secret. Delimiters (space, quotes, ``=``,
# ``:``, ``/``, ``&``, ``,``) end one: ``Credential=KEY/20250101/...`` still shows ``***``.
_VALUE_CHARS = r"A-Za-z0-9_+.~%\-"


def _whole_value(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![{_VALUE_CHARS}]){re.escape(value)}(?![{_VALUE_CHARS}])")


def is_object_uri(location: object) -> bool:
    """True for ``scheme://...`` with a scheme of an object store; local paths are False."""
    if not isinstance(location, str):
        return False
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.lower() in OBJECT_SCHEMES


def _bare(key: str) -> str:
    key = key.lower()
    return next((key[len(p):] for p in _PROVIDER_PREFIXES if key.startswith(p)), key)


def is_public_key(key: str) -> bool:
    """Whether an option's value may be shown (see ``PUBLIC_KEYS``)."""
    return _bare(key) in PUBLIC_KEYS


@dataclass(frozen=True, slots=True)
class StorageOptions:
    """Object-store options as a value: names lowercased, sorted; values strings.

    Hashable (it keys the per-process reader cache, so two queries with different
    credentials never share a reader) and picklable (it travels to executors). Its
    ``repr`` shows public values only:

    >>> StorageOptions.of({"AWS_REGION": "eu-west-1", "aws_secret_access_key": "s3cr3t"})
    StorageOptions(aws_region='eu-west-1', aws_secret_access_key='***')
    """

    items: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, options: Mapping[str, object] | StorageOptions | None) -> StorageOptions:
        """From a mapping; a name given twice (in two spellings of case) is refused."""
        if isinstance(options, StorageOptions):
            return options
        found: dict[str, str] = {}
        for raw_key, value in (options or {}).items():
            key = str(raw_key).lower()
            if key in found:
                raise ConfigError(f"object-store option {key!r} is given twice")
            if not isinstance(value, (str, int, float, bool, timedelta)):
                raise ConfigError(f"object-store option {raw_key!r} must be a string, not "
                                  f"{type(value).__name__}")
            if isinstance(value, timedelta):
                # whole milliseconds: both seglog's and obstore's duration parsers read it
                found[key] = f"{round(value.total_seconds() * 1000)}ms"
            else:
                found[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return cls(tuple(sorted(found.items())))

    def __bool__(self) -> bool:
        return bool(self.items)

    def as_dict(self) -> dict[str, str]:
        return dict(self.items)

    def redact(self, text: str) -> str:
        """``text`` with every non-public option value replaced by ``***`` where it
        stands as a whole value: not inside a longer run of the characters a key, token
        or name is made of. A short secret (an access key ``x``) must not turn
        ``bucket-x`` into ``bucket-***``, nor ``list-type`` into ``list-t***pe``."""
        for key, value in self.items:
            if value and not is_public_key(key):
                text = _whole_value(value).sub(REDACTED, text)
        return text

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={(v if is_public_key(k) else REDACTED)!r}"
                          for k, v in self.items)
        return f"StorageOptions({shown})"


NO_STORAGE_OPTIONS = StorageOptions()
"""No options: the environment decides (the default everywhere options are taken)."""


@dataclass(frozen=True)
class ObjectStoreTarget:
    """A parsed URI: ``url`` is what obstore opens (``s3a`` mapped to ``s3``)."""

    uri: str
    scheme: str
    bucket: str
    prefix: str
    url: str


@dataclass(frozen=True)
class ObjectStoreSettings:
    """Options split the way obstore takes them."""

    config: dict[str, str] = field(default_factory=dict)
    client_options: dict[str, Any] = field(default_factory=dict)
    retry_config: dict[str, Any] = field(default_factory=dict)


def _userinfo(scheme: str, authority: str) -> str | None:
    """The ``user[:password]`` part of a URI's authority, if it has one. Azure's
    ``container@account`` is a name, not credentials: there only ``user:password@``
    (a colon before the ``@``) counts."""
    if "@" not in authority:
        return None
    info = authority.rpartition("@")[0]
    if scheme.lower() in ("s3", "s3a", "gs", "memory") or ":" in info:
        return info
    return None


def redact_uri(text: object) -> str:
    """``text`` with the credentials of an object-store URI replaced by ``***``
    (``s3a://KEY:SECRET@bucket/logs`` -> ``s3a://***@bucket/logs``): what every message
    quoting a URI must show. Other text is returned as it is."""
    s = str(text)
    scheme, sep, rest = s.partition("://")
    if not sep:
        return s
    authority, slash, path = rest.partition("/")
    info = _userinfo(scheme, authority)
    if info is None:
        return s
    return f"{scheme}://***@{authority[len(info) + 1:]}{slash}{path}"


def redact_uris(locations: Iterable[object]) -> str:
    """Log dirs joined for a message, each through ``redact_uri``."""
    return ", ".join(redact_uri(d) for d in locations)


def parse_object_uri(uri: str) -> ObjectStoreTarget:
    """Checks an object-store URI; a bad one raises ``InvalidStorageUriError`` naming it
    (credentials in the URI are refused, and never quoted: ``redact_uri``)."""
    if not is_object_uri(uri):
        raise InvalidStorageUriError(
            f"{redact_uri(uri)!r} is not an object-store URI (scheme://bucket/prefix with a "
            f"scheme in {', '.join(OBJECT_SCHEMES)})")
    shown = redact_uri(uri)
    if any(c in uri for c in "?#") or any(c.isspace() for c in uri):
        raise InvalidStorageUriError(f"object-store URI {shown!r}: no query, fragment or "
                                     "whitespace allowed")
    scheme, _, rest = uri.rstrip("/").partition("://")
    scheme = scheme.lower()
    if _userinfo(scheme, rest.partition("/")[0]) is not None:
        raise InvalidStorageUriError(
            f"object-store URI {shown!r} carries credentials before its bucket name; seglog "
            f"never takes them from a URI (it would echo them): give them as the store's "
            f"options or environment variables ({_ENV_PREFIX.get(scheme, '')}...)")
    bucket, _, prefix = rest.partition("/")
    if scheme == "memory":
        return ObjectStoreTarget(uri.rstrip("/"), scheme, bucket, prefix, "")
    pattern = _S3_BUCKET if scheme in ("s3", "s3a") else _OTHER_BUCKET
    if not pattern.fullmatch(bucket):
        raise InvalidStorageUriError(
            f"object-store URI {shown!r}: {bucket!r} is not a valid bucket or container "
            "name")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise InvalidStorageUriError(
            f"object-store URI {shown!r}: the prefix {prefix!r} has an empty, '.' or '..' part")
    url = f"{'s3' if scheme == 's3a' else scheme}://{rest}"
    return ObjectStoreTarget(uri.rstrip("/"), scheme, bucket, prefix, url.rstrip("/"))


def _duration(uri: str, key: str, value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    try:
        return timedelta(milliseconds=parse_duration_ms(str(value), key))
    except ConfigError as e:
        raise ConfigError(f"{uri}: {e}") from None


def _retry_config(uri: str, given: dict[str, object]) -> dict[str, Any]:
    raw_retries = given.get("max_retries", DEFAULT_MAX_RETRIES)
    try:
        max_retries = int(str(raw_retries))
    except ValueError:
        max_retries = -1
    if max_retries < 0:
        raise ConfigError(f"{uri}: option max_retries={raw_retries!r} is not a count >= 0")
    return {
        "max_retries": max_retries,
        "retry_timeout": _duration(uri, "retry_timeout",
                                   given.get("retry_timeout", DEFAULT_RETRY_TIMEOUT)),
        "backoff": {
            "init_backoff": _duration(uri, "init_backoff",
                                      given.get("init_backoff", DEFAULT_INIT_BACKOFF)),
            "max_backoff": _duration(uri, "max_backoff",
                                     given.get("max_backoff", DEFAULT_MAX_BACKOFF)),
            "base": 2,
        },
    }


def split_options(target: ObjectStoreTarget,
                  options: Mapping[str, object] | None) -> ObjectStoreSettings:
    """Sorts ``options`` into obstore's store config, client options and retry config.

    Store keys are left for obstore to validate (it knows each provider's names); a key it
    rejects is reported by ``ObjectStorage`` as a ``ConfigError`` naming the key.
    """
    options = dict(options or {})
    if target.scheme == "memory":
        if options:
            raise ConfigError(f"{target.uri}: a memory store takes no options "
                              f"(given: {', '.join(sorted(options))})")
        return ObjectStoreSettings(retry_config=_retry_config(target.uri, {}))
    config: dict[str, str] = {}
    # obstore reads client keys from the environment (AWS_ALLOW_HTTP...) only when given no
    # client options at all; seglog always gives some (its timeouts), so it reads them.
    client: dict[str, Any] = dict(DEFAULT_CLIENT)
    env_prefix = _ENV_PREFIX[target.scheme]
    for key in sorted(CLIENT_KEYS):
        env_value = os.environ.get(env_prefix + key.upper())
        if env_value is not None:
            client[key] = env_value
    retry: dict[str, object] = {}
    for raw_key, value in options.items():
        key = str(raw_key).lower()
        bare = next((key[len(p):] for p in _PROVIDER_PREFIXES if key.startswith(p)), key)
        if key in RETRY_KEYS:
            retry[key] = value
        elif bare in CLIENT_KEYS:
            client[bare] = value if isinstance(value, timedelta) else str(value)
        elif not isinstance(value, str):
            raise ConfigError(f"{target.uri}: option {raw_key} must be a string, not "
                              f"{type(value).__name__}")
        else:
            config[key] = value
    _check_endpoint(target, config, client)
    for key in _CLIENT_DURATIONS & client.keys():
        if not isinstance(client[key], timedelta):
            ms = _duration(target.uri, key, client[key]) // timedelta(milliseconds=1)
            client[key] = f"{ms}ms"
    return ObjectStoreSettings(config, client, _retry_config(target.uri, retry))


_ENDPOINT_KEYS = ("endpoint", "endpoint_url")
_TRUE = ("true", "1", "yes", "on")


def _endpoint(target: ObjectStoreTarget, config: Mapping[str, str]) -> tuple[str, str] | None:
    """The endpoint the store will use and where it was given (``option aws_endpoint``
    or ``AWS_ENDPOINT_URL``), or None for the provider's default."""
    for key, value in config.items():
        if _bare(key) in _ENDPOINT_KEYS:
            return value, f"option {key}"
    prefix = _ENV_PREFIX[target.scheme]
    for name in (f"{prefix}ENDPOINT_URL", f"{prefix}ENDPOINT"):
        found = os.environ.get(name)
        if found is not None:
            return found, f"environment variable {name}"
    return None


def _check_endpoint(target: ObjectStoreTarget, config: Mapping[str, str],
                    client: Mapping[str, Any]) -> None:
    """Refuses an endpoint the client cannot use, before a request is made: obstore 0.12
    panics (a ``BaseException`` no caller expects) on one without a scheme or host, and
    answers a plain-HTTP one it was not allowed to use with ``HTTP error: builder
    error``."""
    found = _endpoint(target, config)
    if found is None:
        return
    value, origin = found
    shown = redact_uri(value)
    expected = "expected http://host[:port] or https://host[:port], e.g. http://127.0.0.1:9000"
    try:
        parts = urlsplit(value)
        port = parts.port  # a bad port raises here
    except ValueError:
        parts, port = None, None
    if (parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname
            or any(c.isspace() for c in value) or parts.query or parts.fragment):
        raise ConfigError(f"{target.uri}: {origin}={shown!r} is not an endpoint URL: "
                          f"{expected}")
    if port == 0:
        raise ConfigError(f"{target.uri}: {origin}={shown!r}: port 0 is not a port")
    if parts.scheme.lower() == "http" and str(client.get("allow_http", "")).lower() not in _TRUE:
        raise ConfigError(
            f"{target.uri}: {origin}={shown!r} is plain HTTP, which the store client refuses "
            f"unless allowed: set aws_allow_http=true (storage.aws_allow_http in Spark, "
            f"--storage-option aws_allow_http=true for seglog commands) or "
            f"AWS_ALLOW_HTTP=true, or use https://")
