"""Credentials out of everything gpuscout prints or stores: URLs' `user:password@` and secret query values.

A URL may carry a password (`https://user:pw@host/…`) or a key in its query (`…?api_key=sk-…`); the
request needs the query, but no message, table, log line or result file may show either. Two tools:

* `redact_url(text)` rewrites every URL-looking part of any text: the user-info becomes `***@` and the
  value of every secret-named query parameter becomes `***` (names below, case-insensitive). It works
  on text that does not parse as a URL too, so an error about a malformed URL cannot leak it.
* `url_secrets(url)` lists the secret values themselves (the password and the secret query values, raw
  and percent-decoded), so a server that echoes them back in an error body is scrubbed as well.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

# A query parameter is secret when its name (lower-cased, "-" read as "_") is one of these, or ends
# in one of SECRET_SUFFIXES: over-redacting a harmless `monkey=` costs nothing, a leaked key does.
SECRET_NAMES = frozenset({"api_key", "apikey", "key", "token", "access_token", "secret", "password", "passwd",
                          "pwd", "auth", "authorization", "sig", "signature", "client_secret", "refresh_token",
                          "id_token", "session", "sessionid", "code", "credential", "credentials"})
SECRET_SUFFIXES = ("key", "token", "secret", "password", "signature")
MASK = "***"

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")  # scheme://user:pass@ → scheme://***@
_PARAM = re.compile(r"([?&;])([^=&;#\s?]+)=([^&;#\s]*)")


def is_secret_name(name: str) -> bool:
    key = unquote(name).strip().lower().replace("-", "_")
    return key in SECRET_NAMES or key.endswith(SECRET_SUFFIXES)


def redact_url(text: str) -> str:
    """`text` with every URL user-info and secret query value replaced by ***."""
    if "@" in text:
        text = _USERINFO.sub(rf"\1{MASK}@", text)
    if "=" in text:
        text = _PARAM.sub(_mask_param, text)
    return text


def _mask_param(match: re.Match[str]) -> str:
    sep, name, value = match.groups()
    return f"{sep}{name}={MASK}" if value and is_secret_name(name) else match.group(0)


def url_secrets(url: str) -> tuple[str, ...]:
    """The secret values in `url` (password, secret query values; raw and decoded), longest first."""
    found: set[str] = set()
    authority = url.split("://", 1)[1] if "://" in url else url
    authority = re.split(r"[/?#]", authority, maxsplit=1)[0]
    if "@" in authority:
        userinfo = authority.rsplit("@", 1)[0]
        password = userinfo.split(":", 1)[1] if ":" in userinfo else ""
        found |= {password, unquote(password)}
    for _, name, value in _PARAM.findall(url):
        if is_secret_name(name):
            found |= {value, unquote(value), unquote(value.replace("+", " "))}
    return tuple(sorted((s for s in found if s), key=len, reverse=True))


def scrub(text: str, secrets: tuple[str, ...] | list[str]) -> str:
    """`text` with every secret value (an API key, a URL's password …) and URL credential replaced by ***."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return redact_url(text)
