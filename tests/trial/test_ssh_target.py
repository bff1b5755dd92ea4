"""`user@host:port` as the ssh engine reads it: what it accepts, and a clear refusal (what, why, how) for the
rest, before any connection is tried."""

from __future__ import annotations

import pytest

from gpuscout.trial.engine import EngineError
from gpuscout.trial.engines.ssh_target import SshTarget, parse_target


@pytest.mark.parametrize(("text", "expected"), [
    ("root@region-1.autodl.com:12345", SshTarget("root", "region-1.autodl.com", 12345)),
    ("ubuntu@10.0.0.7", SshTarget("ubuntu", "10.0.0.7", 22)),
    ("a.b_c-d@host:1", SshTarget("a.b_c-d", "host", 1)),
    ("me@[2001:db8::1]:2222", SshTarget("me", "2001:db8::1", 2222)),
    ("me@[::1]", SshTarget("me", "::1", 22)),
    ("me@[fe80::1%eth0]:22", SshTarget("me", "fe80::1%eth0", 22)),
    ("user@host:65535", SshTarget("user", "host", 65535)),
])
def test_accepted_forms(text: str, expected: SshTarget) -> None:
    target = parse_target(text)
    assert target == expected
    assert parse_target(str(target)) == target  # the address it prints reads back the same


@pytest.mark.parametrize(("text", "why"), [
    ("", "empty"),
    ("   ", "empty"),
    ("host:22", "the user is missing"),
    ("@host:22", "the user before '@' is empty"),
    ("root@", "the host after '@' is empty"),
    ("root@host:", "the port after ':' is empty"),
    ("root@host:ssh", "the port 'ssh' is not a number"),
    ("root@host:0", "outside 1-65535"),
    ("root@host:70000", "outside 1-65535"),
    ("root@host:-1", "not a number"),
    ("-oProxyCommand=x@host:22", "not a user name"),
    ("root@-oProxyCommand=x:22", "not a host name"),
    ("root@ho st:22", "spaces"),
    (" root@host:22", "spaces"),
    ("root@host;rm -rf /:22", "spaces"),
    ("root@host$(id):22", "not a host name"),
    ("root@2001:db8::1", "IPv6 address must be written in brackets"),
    ("root@[2001:db8::1:22", "no closing ']'"),
    ("root@[2001:db8::1]22", "only ':port' may follow"),
    ("root@[host]:22", "not an IPv6 address"),
])
def test_refusals_say_what_why_and_how(text: str, why: str) -> None:
    with pytest.raises(EngineError) as raised:
        parse_target(text)
    message = str(raised.value)
    assert why in message
    assert repr(text) in message  # what: the text as given
    assert "give it as user@host:port" in message  # how to fix


def test_the_command_a_user_types_names_the_port_only_when_it_is_not_22() -> None:
    assert parse_target("root@box:2222").ssh_command() == "ssh -p 2222 root@box"
    assert parse_target("root@box").ssh_command() == "ssh root@box"
