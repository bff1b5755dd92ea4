"""`user@host:port`: how a user names a box they rented by hand, read strictly.

The text ends up on ssh's command line, so anything ssh would read as an option (a leading "-") or a shell
would split (spaces, quotes) is refused here with the reason, before any connection is tried.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuscout.trial.engine import EngineError

DEFAULT_PORT = 22  # ssh's own default (RFC 4253 §4.1 names 22 the port SSH servers listen on)

# POSIX portable user names (letters, digits, ".", "_", "-"; not starting with "-"), plus "$" for the
# machine accounts some systems allow at the end.
_USER = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]*\$?")
# A DNS name or IPv4 address: letters, digits, dots, hyphens, not starting with "-".
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?")

_FORM = "give it as user@host:port, e.g. root@region-1.example.com:22 or ubuntu@[2001:db8::1]:2222"


@dataclass(frozen=True)
class SshTarget:
    user: str
    host: str  # an IPv6 address without its brackets
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.port}"

    @property
    def destination(self) -> str:
        """What ssh takes as its destination argument (the port goes with -p)."""
        return f"{self.user}@{self.host}"

    def ssh_command(self) -> str:
        """The plain ssh command a user types to reach this box (for messages)."""
        port = "" if self.port == DEFAULT_PORT else f"-p {self.port} "
        return f"ssh {port}{self.destination}"


def parse_target(text: str) -> SshTarget:
    """Read `user@host:port` (the port may be left out for 22; an IPv6 address goes in brackets)."""

    def bad(why: str) -> EngineError:
        return EngineError(f"ssh target {text!r}: {why}; {_FORM}")

    if not text or not text.strip():
        raise bad("it is empty")
    if text != text.strip() or any(c.isspace() for c in text):
        raise bad("it contains spaces")
    if "@" not in text:
        raise bad("the user is missing (the account to log in as, before '@')")
    user, _, rest = text.rpartition("@")
    if not user:
        raise bad("the user before '@' is empty")
    if not _USER.fullmatch(user):
        raise bad(f"{user!r} is not a user name (letters, digits, '.', '_', '-'; not starting with '-')")
    port_text = ""
    if rest.startswith("["):
        host, sep, after = rest[1:].partition("]")
        if not sep:
            raise bad("the '[' before an IPv6 address has no closing ']'")
        if not _IPV6.fullmatch(host) or ":" not in host:
            raise bad(f"{host!r} inside brackets is not an IPv6 address")
        if after:
            if not after.startswith(":"):
                raise bad("after ']' only ':port' may follow")
            port_text = after[1:]
            if not port_text:
                raise bad("the port after ':' is empty")
    else:
        if rest.count(":") > 1:
            raise bad("an IPv6 address must be written in brackets")
        host, sep, port_text = rest.partition(":")
        if sep and not port_text:
            raise bad("the port after ':' is empty")
        if not host:
            raise bad("the host after '@' is empty")
        if not _HOST.fullmatch(host):
            raise bad(f"{host!r} is not a host name or address (letters, digits, '.', '-'; not starting with '-')")
    port = DEFAULT_PORT
    if port_text:
        if not port_text.isdigit():
            raise bad(f"the port {port_text!r} is not a number")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise bad(f"the port {port} is outside 1-65535")
    return SshTarget(user, host, port)
