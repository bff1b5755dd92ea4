"""Credentials out of everything gpuscout prints or stores: URLs' `user:password@` and secret query values.

A URL may carry a password (`https://user:pw@host/…`) or a key in its query (`…?api_key=sk-…`); the
request needs the query, but no message, table, log line or result file may show either. Two tools:

* `redact_url(text)` rewrites every URL-looking part of any text: the user-info becomes `***@`, the
  value of every secret-named query or fragment parameter becomes `***` (names below, case-insensitive),
  and so does any query or fragment value shaped like a credential whatever its name (`looks_secret`:
  a known key prefix such as `sk-` or `hf_`, or 32+ key characters mixing letters and digits, as
  generated keys are), so `?k=sk-…` or `#access_token=…` is masked too. It works on text that does not parse as
  a URL too, so an error about a malformed URL cannot leak it.
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
                          "id_token", "session", "sessionid", "code", "credential", "credentials", "sas", "jwt",
                          "bearer", "cookie", "otp", "private"})
SECRET_SUFFIXES = ("key", "token", "secret", "password", "signature", "credential", "sig")
# Prefixes of the keys the common providers issue (OpenAI sk-, Hugging Face hf_, GitHub ghp_/gho_/
# github_pat_, Slack xox?-, AWS access key ids AKIA/ASIA, JSON web tokens eyJ, GitLab glpat-, Stripe),
# and the length from which a run of key characters holding both letters and digits is taken for a
# generated key: 32, the shortest common length (a 128-bit hex token; OpenAI's keys are 48+, Hugging
# Face's 37, GitHub's 40), longer than model names, ids and numbers in an ordinary query.
KEY_PREFIXES = ("sk-", "sk_", "hf_", "ghp_", "gho_", "ghs_", "github_pat_", "xoxb-", "xoxp-", "xoxa-", "AKIA", "ASIA",
                "eyJ", "glpat-", "pk_live_", "rk_live_")
KEY_MIN_CHARS = 32
MASK = "***"

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")  # scheme://user:pass@ → scheme://***@
_PARAM = re.compile(r"([?&;#])([^=&;#\s?]+)=([^&;#\s]*)")
_BARE = re.compile(r"([?&;#])([^=&;#\s?]+)(?=$|[&;#\s])")  # a query or fragment part with no name: `?sk-…`
_KEYLIKE = re.compile(r"[A-Za-z0-9_\-.~+/=%]{" + str(KEY_MIN_CHARS) + ",}")


def is_secret_name(name: str) -> bool:
    key = unquote(name).strip().lower().replace("-", "_")
    return key in SECRET_NAMES or key.endswith(SECRET_SUFFIXES)


def looks_secret(value: str) -> bool:
    """A value shaped like an issued key: a known prefix, or 32+ key characters mixing letters and digits."""
    raw = unquote(value)
    if raw.startswith(KEY_PREFIXES):
        return True
    return bool(_KEYLIKE.fullmatch(raw)) and any(c.isdigit() for c in raw) and any(c.isalpha() for c in raw)


def redact_url(text: str) -> str:
    """`text` with every URL user-info and secret query or fragment value replaced by ***."""
    if "@" in text:
        text = _USERINFO.sub(rf"\1{MASK}@", text)
    if "=" in text:
        text = _PARAM.sub(_mask_param, text)
    if any(c in text for c in "?#"):
        text = _BARE.sub(_mask_bare, text)
    return text


def _mask_param(match: re.Match[str]) -> str:
    sep, name, value = match.groups()
    return f"{sep}{name}={MASK}" if value and (is_secret_name(name) or looks_secret(value)) else match.group(0)


def _mask_bare(match: re.Match[str]) -> str:
    sep, value = match.groups()
    return f"{sep}{MASK}" if value != MASK and looks_secret(value) else match.group(0)


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
        if is_secret_name(name) or looks_secret(value):
            found |= {value, unquote(value), unquote(value.replace("+", " "))}
    for _, value in _BARE.findall(url):
        if looks_secret(value):
            found |= {value, unquote(value)}
    return tuple(sorted((s for s in found if s), key=len, reverse=True))


def scrub(text: str, secrets: tuple[str, ...] | list[str]) -> str:
    """`text` with every secret value (an API key, a URL's password …) and URL credential replaced by ***."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return redact_url(text)
