"""Special-use domain names: the DNS names that no public resolver answers, by their registry (IANA's "Special-Use
Domain Names", which RFC 6761 set up). A server named under one is not reachable from a cluster's pods, and under some
from nowhere. Standard library only: the Pulumi program (trainMlflowTrackingUri, `tools.job submit`) and the job's
local run (`workload.local`) both read it."""
from __future__ import annotations

# Resolved nowhere: RFC 7686 (.onion: a Tor address; DNS resolvers answer NXDOMAIN, and no HTTP client here speaks
# Tor) and RFC 6761 6.4 (.invalid: "guaranteed to be invalid").
NEVER_RESOLVED = {".onion": "RFC 7686", ".invalid": "RFC 6761"}
# Resolved, if at all, only on the machine or its own network, never by public DNS: RFC 6761 (.test, .example,
# .localhost), RFC 6762 (.local, mDNS on the link), RFC 8375 (.home.arpa), RFC 9476 (.alt), and ICANN's reservation of
# .internal for private use (ICANN Board resolution 2024.07.29.06).
PRIVATE_ONLY = {".test": "RFC 6761", ".example": "RFC 6761", ".localhost": "RFC 6761", ".local": "RFC 6762",
                ".home.arpa": "RFC 8375", ".alt": "RFC 9476", ".internal": "ICANN 2024.07.29.06"}


def _under(host: str, registry: dict[str, str]) -> str | None:
    name = "." + host.rstrip(".").lower()
    return next((f"{suffix} ({source})" for suffix, source in registry.items() if name.endswith(suffix)), None)


def never_resolved(host: str) -> str | None:
    """The special-use name `host` is under that no resolver anywhere answers (`.onion (RFC 7686)`), or None."""
    return _under(host, NEVER_RESOLVED)


def not_public(host: str) -> str | None:
    """The special-use name `host` is under that public DNS never answers (never_resolved's, and the private ones:
    `.test (RFC 6761)`), or None."""
    return _under(host, NEVER_RESOLVED) or _under(host, PRIVATE_ONLY)
