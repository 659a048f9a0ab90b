"""Who may reach what, judged without a sandbox: entries as parsed, the ceiling, a sandbox's
policy made from it (corral's subset, E2B's options, any policy bound to it), and which
addresses may be dialled at all."""

from __future__ import annotations

import ipaddress
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import NetworkPolicyError
from corral.network import NetworkCeiling, SandboxNetwork
from corral.network._policy import canonical, parse_entries

A_SECRET = "Bearer not-to-be-shown-0123456789"


def address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


# entries ----------------------------------------------------------------------------------


def test_names_are_lower_cased_and_lose_their_trailing_dot() -> None:
    entries = parse_entries(["PyPI.Org.", "  files.pythonhosted.org  "])
    assert entries.names == {"pypi.org", "files.pythonhosted.org"}
    assert entries.matches_name("pypi.org")
    assert not entries.matches_name("evil-pypi.org")
    assert not entries.matches_name("sub.pypi.org")


def test_a_wildcard_covers_the_names_below_it_and_not_the_name_itself() -> None:
    entries = parse_entries(["*.Example.COM."])
    assert entries.wildcards == {"example.com"}
    assert entries.matches_name("api.example.com")
    assert entries.matches_name("a.b.example.com")
    assert not entries.matches_name("example.com")
    assert not entries.matches_name("badexample.com")


def test_a_star_alone_covers_every_name() -> None:
    entries = parse_entries(["*"])
    assert entries.matches_name("anything.at.all")
    assert entries.as_list() == ["*"]
    assert not entries.matches_address(address("8.8.8.8"))  # names, not addresses


def test_addresses_and_cidrs_of_both_families() -> None:
    entries = parse_entries(["192.0.2.7", "10.1.2.3/8", "2001:db8::/32", "2001:db8:1::1"])
    assert entries.networks == (
        ipaddress.ip_network("192.0.2.7/32"),
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("2001:db8::/32"),
        ipaddress.ip_network("2001:db8:1::1/128"),
    )
    assert entries.matches_address(address("10.200.0.1"))
    assert entries.matches_address(address("2001:db8:ffff::1"))
    assert not entries.matches_address(address("11.0.0.1"))
    assert not entries.names


def test_an_ipv4_mapped_cidr_is_the_ipv4_cidr_it_stands_for() -> None:
    entries = parse_entries(["::ffff:10.0.0.0/104", "::ffff:192.0.2.1"])
    assert entries.networks == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("192.0.2.1/32"),
    )
    assert entries.matches_address(address("10.9.9.9"))
    assert entries.matches_address(address("::ffff:10.9.9.9"))


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "   ",
        "bücher.example",
        "-lead.example",
        "trail-.example",
        "mid.-dash.example",
        "two..dots.example",
        "a" * 64 + ".example",
        ".".join(["abcdefg"] * 32) + ".ab",  # 258 characters
        "host.123",
        "1.2.3",
        "*.",
        "*.-x.example",
        "**.example",
        "*example.com",
        "under_score.example",
        "space in.example",
        "10.0.0.0/33",
        "2001:db8::/129",
    ],
)
def test_an_entry_that_is_none_is_refused_by_name(entry: str) -> None:
    with pytest.raises(NetworkPolicyError) as caught:
        parse_entries(["fine.example", entry], what="allow")
    assert caught.value.entry == entry
    assert repr(entry) in str(caught.value)
    assert str(caught.value).startswith("allow: ")


def test_the_longest_name_is_253_characters() -> None:
    longest = ".".join(["a" * 63] * 3 + ["b" * 61])
    assert len(longest) == 253
    assert parse_entries([longest + "."]).names == {longest}
    with pytest.raises(NetworkPolicyError):
        parse_entries(["a" + longest])


@pytest.mark.parametrize("entry", [7, None, b"pypi.org", ["pypi.org"]])
def test_an_entry_that_is_no_string_is_refused(entry: object) -> None:
    with pytest.raises(NetworkPolicyError, match="is not a name") as caught:
        parse_entries(["pypi.org", entry])  # type: ignore[list-item]
    assert repr(entry) in str(caught.value)


def test_at_most_1024_entries() -> None:
    names = [f"host{n}.example" for n in range(1025)]
    assert len(parse_entries(names[:1024]).names) == 1024
    with pytest.raises(NetworkPolicyError, match="at most 1024 entries"):
        parse_entries(names)


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.text(max_size=40), max_size=4))
def test_arbitrary_text_parses_or_is_a_policy_error(values: list[str]) -> None:
    try:
        entries = parse_entries(values)
    except NetworkPolicyError:
        return
    for name in entries.names:
        assert name == name.lower()
        assert name.isascii()
        assert not name.endswith(".")


@settings(max_examples=100, deadline=None, database=None)
@given(st.lists(st.from_regex(r"[*a-z0-9.:/-]{0,20}", fullmatch=True), max_size=4))
def test_entry_like_text_parses_or_is_a_policy_error(values: list[str]) -> None:
    try:
        parse_entries(values)
    except NetworkPolicyError as exc:
        refused = exc.entry
    else:
        return
    assert refused in values


# covers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ceiling", "entry", "covered"),
    [
        (["pypi.org"], "pypi.org", True),
        (["pypi.org"], "PYPI.org.", True),
        (["pypi.org"], "www.pypi.org", False),
        (["*.example.com"], "api.example.com", True),
        (["*.example.com"], "example.com", False),
        (["*.example.com"], "*.api.example.com", True),
        (["*.example.com"], "*.example.com", True),
        (["*.api.example.com"], "*.example.com", False),
        (["example.com"], "*.example.com", False),
        (["*.com"], "*", False),
        (["*"], "*", True),
        (["*"], "*.example.com", True),
        (["*"], "anything.example", True),
        (["*"], "192.0.2.1", False),
        (["10.0.0.0/8"], "10.1.0.0/16", True),
        (["10.0.0.0/8"], "10.1.2.3", True),
        (["10.0.0.0/8"], "0.0.0.0/0", False),
        (["10.0.0.0/8"], "::ffff:10.1.2.3", True),
        (["10.0.0.0/8"], "::ffff:0:0/96", False),
        (["2001:db8::/32"], "2001:db8:5::/48", True),
        (["2001:db8::/32"], "10.0.0.1", False),
        (["10.0.0.0/8"], "10.example", False),
    ],
)
def test_covers(ceiling: list[str], entry: str, covered: bool) -> None:
    assert parse_entries(ceiling).covers(entry) is covered


# the ceiling ------------------------------------------------------------------------------


def test_a_ceiling_parses_its_entries_hosts_and_bounds() -> None:
    ceiling = NetworkCeiling.parse(
        allow=["PyPI.org", "10.0.0.0/8"],
        deny=["bad.example"],
        private_allow=["10.1.0.0/16", "::ffff:10.2.0.0/112"],
        hosts={"Internal.Example.": ["10.1.0.5", "::ffff:10.1.0.6"], "one.example": "fd00::1"},
        max_bytes=1000,
        max_connections=2,
    )
    assert ceiling.enabled
    assert ceiling.allow.names == {"pypi.org"}
    assert ceiling.private_allow.networks == (
        ipaddress.ip_network("10.1.0.0/16"),
        ipaddress.ip_network("10.2.0.0/16"),
    )
    assert dict(ceiling.hosts) == {
        "internal.example": (address("10.1.0.5"), address("10.1.0.6")),
        "one.example": (address("fd00::1"),),
    }
    assert (ceiling.max_bytes, ceiling.max_connections) == (1000, 2)


def test_a_ceiling_without_allow_is_no_network() -> None:
    ceiling = NetworkCeiling.parse(deny=["bad.example"])
    assert not ceiling.enabled
    assert not ceiling.e2b(allow_internet_access=True, allow_out=None, deny_out=None).enabled


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"hosts": {"db.example": "db.internal"}}, "must map to IP addresses"),
        ({"hosts": {"db.example": ["10.0.0.1", "nope"]}}, "must map to IP addresses"),
        ({"hosts": {"not a host": "10.0.0.1"}}, "is not a host name"),
        ({"private_allow": ["intranet.example"]}, "not names"),
        ({"private_allow": ["*.corp.example"]}, "not names"),
        ({"private_allow": ["10.0.0.0/99"]}, "private_allow: "),
        ({"deny": ["-x.example"]}, "deny: "),
        ({"hosts": {"*.example": "10.0.0.1"}}, "is not a host name"),
        ({"max_bytes": 0}, "must be positive"),
        ({"max_connections": 0}, "must be positive"),
        ({"max_connections": -3}, "must be positive"),
    ],
)
def test_a_ceiling_refuses_what_it_cannot_honour(
    settings_: dict[str, object], message: str
) -> None:
    with pytest.raises(NetworkPolicyError, match=message):
        NetworkCeiling.parse(allow=["pypi.org"], **settings_)  # type: ignore[arg-type]


NEVER_DIALLED = [
    "127.0.0.1",
    "127.8.9.10",
    "::1",
    "169.254.169.254",
    "fe80::1",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "100.64.0.1",  # carrier-grade NAT
    "fd00::1",
    "0.0.0.0",
    "::",
    "240.0.0.1",
    "255.255.255.255",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "::ffff:192.168.1.1",
]


@pytest.mark.parametrize("target", NEVER_DIALLED)
def test_non_global_addresses_are_never_dialled_without_private_allow(target: str) -> None:
    ceiling = NetworkCeiling.parse(allow=["*", "0.0.0.0/0", "::/0"])
    assert not ceiling.reachable(address(target))


@pytest.mark.parametrize("target", NEVER_DIALLED)
def test_private_allow_opens_exactly_what_it_lists(target: str) -> None:
    plain = canonical(address(target))
    ceiling = NetworkCeiling.parse(allow=["*"], private_allow=[str(plain)])
    assert ceiling.reachable(address(target))
    others = [other for other in NEVER_DIALLED if canonical(address(other)) != plain]
    assert not any(ceiling.reachable(address(other)) for other in others)


def test_the_hosts_own_addresses_are_never_dialled() -> None:
    ceiling = NetworkCeiling.parse(allow=["*"])
    own = frozenset({address("93.184.216.20"), address("2606:4700::20")})
    assert ceiling.reachable(address("93.184.216.21"), own)
    assert not ceiling.reachable(address("93.184.216.20"), own)
    assert not ceiling.reachable(address("::ffff:93.184.216.20"), own)
    assert not ceiling.reachable(address("2606:4700::20"), own)
    listed = NetworkCeiling.parse(allow=["*"], private_allow=["93.184.216.20"])
    assert listed.reachable(address("93.184.216.20"), own)


@pytest.mark.parametrize("target", ["8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_global_addresses_are_reachable(target: str) -> None:
    assert NetworkCeiling.parse(allow=["*"]).reachable(address(target))


# corral's subset --------------------------------------------------------------------------

CEILING = NetworkCeiling.parse(
    allow=["pypi.org", "*.pythonhosted.org", "api.example.com", "203.0.113.0/24"],
    deny=["bad.pythonhosted.org"],
)


def test_a_subset_allows_what_it_asks_and_keeps_the_ceilings_deny() -> None:
    policy = CEILING.subset(["pypi.org", "*.pythonhosted.org", "203.0.113.8"])
    assert policy.allows_name("pypi.org")
    assert policy.allows_name("files.pythonhosted.org")
    assert not policy.allows_name("bad.pythonhosted.org")
    assert not policy.allows_name("api.example.com")  # in the ceiling, not asked for
    assert policy.allows_address(address("203.0.113.8"))
    assert policy.allows_address(address("::ffff:203.0.113.8"))
    assert not policy.allows_address(address("203.0.113.9"))


@pytest.mark.parametrize(
    "beyond", ["example.com", "*.example.com", "pythonhosted.org", "203.0.0.0/16", "*"]
)
def test_a_subset_beyond_the_ceiling_is_refused_naming_the_entry(beyond: str) -> None:
    with pytest.raises(NetworkPolicyError, match="beyond what this server allows") as caught:
        CEILING.subset(["pypi.org", beyond])
    assert caught.value.entry == beyond


def test_inject_rules_are_kept_for_hosts_the_subset_allows() -> None:
    policy = CEILING.subset(
        ["api.example.com"], inject={"API.example.com": {"Authorization": A_SECRET}}
    )
    assert dict(policy.inject["api.example.com"]) == {"Authorization": A_SECRET}


@pytest.mark.parametrize(
    ("inject", "message"),
    [
        ({"pypi.org": {"X-Key": "v"}}, "not allowed by the policy"),
        ({"not a host": {"X-Key": "v"}}, "is not a host name"),
        ({"api.example.com": {}}, "needs an object of headers"),
        ({"api.example.com": "X-Key: v"}, "needs an object of headers"),
        ({"api.example.com": {"X Key": "v"}}, "is not a header name"),
        ({"api.example.com": {"X-Key:": "v"}}, "is not a header name"),
        ({"api.example.com": {"": "v"}}, "is not a header name"),
        ({"api.example.com": {"X-Key": "v\r\nX-Evil: 1"}}, "printable ASCII"),
        ({"api.example.com": {"X-Key": "v\x00"}}, "printable ASCII"),
        ({"api.example.com": {"X-Key": "clé"}}, "printable ASCII"),
        ({"api.example.com": {"X-Key": 7}}, "printable ASCII"),
        ({"api.example.com": {"X-Key": "v" * 8192}}, "too long"),
        (["api.example.com"], "an object of host names"),
    ],
)
def test_bad_inject_rules_are_refused(inject: object, message: str) -> None:
    with pytest.raises(NetworkPolicyError, match=message):
        CEILING.subset(["api.example.com"], inject=inject)


def test_the_longest_injected_header_is_accepted() -> None:
    value = "v" * (8192 - len("X-Key"))
    policy = CEILING.subset(["api.example.com"], inject={"api.example.com": {"X-Key": value}})
    assert policy.inject["api.example.com"]["X-Key"] == value


def test_describe_names_hosts_with_rules_and_never_their_values() -> None:
    policy = CEILING.subset(
        ["api.example.com", "pypi.org"],
        inject={"api.example.com": {"Authorization": A_SECRET, "X-Other": "second-secret"}},
    )
    described = policy.describe()
    assert described == {
        "allow": ["api.example.com", "pypi.org"],
        "deny": ["bad.pythonhosted.org"],
        "exceptions": [],
        "inject": ["api.example.com"],
    }
    assert A_SECRET not in repr(described)
    assert "second-secret" not in repr(described)


# E2B's options ----------------------------------------------------------------------------


def test_e2b_without_internet_access_allows_nothing() -> None:
    policy = CEILING.e2b(allow_internet_access=False, allow_out=["pypi.org"], deny_out=None)
    assert not policy.enabled
    assert not policy.allows_name("pypi.org")
    assert not policy.allows_address(address("203.0.113.1"))


def test_e2b_by_default_allows_all_of_the_ceiling_and_no_more() -> None:
    policy = CEILING.e2b(allow_internet_access=None, allow_out=None, deny_out=None)
    assert policy.allows_name("pypi.org")
    assert policy.allows_name("files.pythonhosted.org")
    assert not policy.allows_name("bad.pythonhosted.org")
    assert not policy.allows_name("example.org")
    assert policy.allows_address(address("203.0.113.1"))
    assert not policy.allows_address(address("198.51.100.1"))


def test_e2b_deny_out_refuses_and_allow_out_beats_it() -> None:
    policy = CEILING.e2b(
        allow_internet_access=True,
        allow_out=["files.pythonhosted.org", "203.0.113.7"],
        deny_out=["*.pythonhosted.org", "pypi.org", "203.0.113.0/28"],
    )
    assert not policy.allows_name("pypi.org")
    assert not policy.allows_name("a.pythonhosted.org")
    assert policy.allows_name("files.pythonhosted.org")
    assert policy.allows_name("api.example.com")
    assert not policy.allows_address(address("203.0.113.6"))
    assert policy.allows_address(address("203.0.113.7"))
    assert policy.allows_address(address("203.0.113.99"))


def test_e2b_allow_out_never_reaches_past_the_ceiling() -> None:
    policy = CEILING.e2b(
        allow_internet_access=True,
        allow_out=["bad.pythonhosted.org", "example.org", "198.51.100.1"],
        deny_out=["0.0.0.0/0"],
    )
    assert not policy.allows_name("bad.pythonhosted.org")  # the ceiling's deny
    assert not policy.allows_name("example.org")  # not in the ceiling's allow
    assert not policy.allows_address(address("198.51.100.1"))


@pytest.mark.parametrize("everything", ["0.0.0.0/0", "::/0"])
def test_e2b_deny_out_of_everything_leaves_only_allow_out(everything: str) -> None:
    ceiling = NetworkCeiling.parse(allow=["*", "0.0.0.0/0", "2001:db8::/32"])
    policy = ceiling.e2b(
        allow_internet_access=True,
        allow_out=["pypi.org", "192.0.2.1", "2001:db8::1"],
        deny_out=[everything],
    )
    assert policy.allows_name("pypi.org")
    assert not policy.allows_name("example.org")
    assert policy.allows_address(address("192.0.2.1"))
    assert policy.allows_address(address("2001:db8::1"))
    assert not policy.allows_address(address("192.0.2.2"))
    assert not policy.allows_address(address("2001:db8::2"))  # "everything" has two families


@pytest.mark.parametrize(
    ("allow_out", "deny_out", "message"),
    [(["not a name"], None, "allow_out: "), (None, ["10.0.0.0/40"], "deny_out: ")],
)
def test_e2b_malformed_entries_are_refused(
    allow_out: list[str] | None, deny_out: list[str] | None, message: str
) -> None:
    with pytest.raises(NetworkPolicyError, match=message):
        CEILING.e2b(allow_internet_access=True, allow_out=allow_out, deny_out=deny_out)


def test_e2b_rules_must_name_hosts_of_the_ceiling() -> None:
    rules = {"api.example.com": {"Authorization": A_SECRET}}
    policy = CEILING.e2b(allow_internet_access=True, allow_out=None, deny_out=None, rules=rules)
    assert policy.inject["api.example.com"]["Authorization"] == A_SECRET
    assert A_SECRET not in repr(policy.describe())
    with pytest.raises(NetworkPolicyError, match="not allowed by the policy"):
        CEILING.e2b(
            allow_internet_access=True,
            allow_out=None,
            deny_out=None,
            rules={"example.org": {"Authorization": A_SECRET}},
        )


# bound ------------------------------------------------------------------------------------


def test_bound_refuses_a_policy_beyond_the_ceiling_naming_the_entry() -> None:
    beyond = SandboxNetwork(allow=parse_entries(["pypi.org", "*.example.org"]))
    with pytest.raises(NetworkPolicyError, match=r"\*\.example\.org") as caught:
        CEILING.bound(beyond)
    assert caught.value.entry == "*.example.org"
    narrower = NetworkCeiling.parse(allow=["*.pythonhosted.org", "203.0.113.0/25"])
    with pytest.raises(NetworkPolicyError, match=r"203\.0\.113\.0/24") as caught:
        narrower.bound(CEILING.subset(["*.pythonhosted.org", "203.0.113.0/24"]))
    assert caught.value.entry == "203.0.113.0/24"
    another = NetworkCeiling.parse(allow=["pypi.org"]).whole()
    assert CEILING.bound(another).allows_name("pypi.org")


def test_bound_adds_the_ceilings_deny_to_the_policys_own() -> None:
    made_elsewhere = SandboxNetwork(
        allow=parse_entries(["*.pythonhosted.org", "203.0.113.0/24"]),
        deny=parse_entries(["old.pythonhosted.org", "203.0.113.9"]),
        inject={"files.pythonhosted.org": {"X-Key": "v"}},
    )
    assert made_elsewhere.allows_name("bad.pythonhosted.org")
    bound = CEILING.bound(made_elsewhere)
    assert not bound.allows_name("bad.pythonhosted.org")
    assert not bound.allows_name("old.pythonhosted.org")
    assert bound.allows_name("files.pythonhosted.org")
    assert not bound.allows_address(address("203.0.113.9"))
    assert bound.allows_address(address("203.0.113.10"))
    assert bound.inject == made_elsewhere.inject
    assert CEILING.bound(bound) == bound  # bounding twice changes nothing more


# properties: what a policy made from a ceiling allows, the ceiling allows -------------------

_LABELS = ("a", "b", "example")
_NAMES = [
    ".".join(labels) for size in (1, 2, 3) for labels in itertools.product(_LABELS, repeat=size)
]
_CIDRS = ["198.51.100.0/24", "198.51.100.0/25", "198.51.100.7", "2001:db8::/32", "2001:db8::7"]
_ADDRESSES = [address(a) for a in ("198.51.100.7", "198.51.100.200", "2001:db8::7", "2001:db8::8")]
_ENTRY = st.one_of(
    st.sampled_from(_NAMES),
    st.sampled_from(_NAMES).map(lambda name: "*." + name),
    st.just("*"),
    st.sampled_from(_CIDRS),
)
_ENTRIES = st.lists(_ENTRY, max_size=5)


def _within(policy: SandboxNetwork, ceiling: NetworkCeiling) -> None:
    everything = ceiling.whole()
    for name in _NAMES:
        if policy.allows_name(name):
            assert everything.allows_name(name), name
    for one in _ADDRESSES:
        if policy.allows_address(one):
            assert everything.allows_address(one), one


@settings(max_examples=100, deadline=None, database=None)
@given(allow=_ENTRIES, deny=_ENTRIES, asked=_ENTRIES)
def test_a_subset_never_allows_what_the_ceiling_does_not(
    allow: list[str], deny: list[str], asked: list[str]
) -> None:
    ceiling = NetworkCeiling.parse(allow=allow, deny=deny)
    try:
        policy = ceiling.subset(asked)
    except NetworkPolicyError as exc:
        refused = exc.entry
    else:
        _within(policy, ceiling)
        return
    assert refused in asked


@settings(max_examples=100, deadline=None, database=None)
@given(allow=_ENTRIES, deny=_ENTRIES, asked=_ENTRIES, refused=_ENTRIES, exceptions=_ENTRIES)
def test_any_policy_bound_to_a_ceiling_allows_nothing_beyond_it(
    allow: list[str], deny: list[str], asked: list[str], refused: list[str], exceptions: list[str]
) -> None:
    ceiling = NetworkCeiling.parse(allow=allow, deny=deny)
    policy = SandboxNetwork(
        allow=parse_entries(asked),
        refused=parse_entries(refused),
        exceptions=parse_entries(exceptions),
    )
    try:
        bound = ceiling.bound(policy)
    except NetworkPolicyError:
        return
    _within(bound, ceiling)
    e2b = ceiling.e2b(allow_internet_access=True, allow_out=exceptions, deny_out=refused)
    _within(e2b, ceiling)


def test_ipv6_forms_of_an_ipv4_address_are_judged_as_it() -> None:
    ceiling = NetworkCeiling.parse(allow=["*"])
    for form in ("::127.0.0.1", "64:ff9b::169.254.169.254", "64:ff9b::a9fe:a9fe"):
        assert not ceiling.reachable(ipaddress.ip_address(form)), form
    assert ceiling.reachable(ipaddress.ip_address("64:ff9b::8.8.8.8"))


def test_a_text_is_not_a_list_of_entries() -> None:
    with pytest.raises(NetworkPolicyError, match="a list of entries"):
        parse_entries("pypi.org")
