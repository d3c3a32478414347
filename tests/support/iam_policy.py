"""A small IAM policy evaluator, as strict as AWS for what the tests feed it: identity policies and trust policies
with Action/NotAction, Resource/NotResource and Condition, explicit Deny over Allow, and no match meaning deny.

moto's own evaluator (moto/iam/access_control.py with moto/iam/policy_conditions.py) ignores most condition
operators, so a policy scoped by `s3:prefix` passes there whatever the request. This one follows the IAM user guide:
- "Policy evaluation logic": an explicit Deny wins, then an Allow, else the request is implicitly denied.
- "IAM JSON policy elements: Condition operators": every operator of a block must hold (AND), any value of a key's list
  may match (OR); a key the request lacks fails every operator except `Null` ("true" matches the absent key), the
  negated string/ARN operators (StringNotEquals, StringNotLike, ArnNotEquals, ArnNotLike hold when the key is absent),
  and the `...IfExists` forms (which hold when it is absent).
- "IAM JSON policy elements: Action / Resource": `*` and `?` wildcards, actions case-insensitive, resources and
  string values case-sensitive (StringEqualsIgnoreCase is the exception).
Only the operators below are known; an unknown one raises, so a policy the tests cannot judge fails the test instead
of passing it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _wildcard(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM's `*` (any run) and `?` (one character), nothing else special (brackets are literal)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


_STRING_OPERATORS = {
    "StringEquals": lambda pattern, value: pattern == value,
    "StringLike": lambda pattern, value: _wildcard(pattern, value),
    "StringEqualsIgnoreCase": lambda pattern, value: pattern.lower() == value.lower(),
    "ArnEquals": lambda pattern, value: pattern == value,
    "ArnLike": lambda pattern, value: _wildcard(pattern, value),
}
_NEGATED = {"StringNotEquals": "StringEquals", "StringNotLike": "StringLike", "ArnNotEquals": "ArnEquals",
            "ArnNotLike": "ArnLike"}


def _operator_holds(operator: str, key: str, expected: Any, context: dict[str, Any]) -> bool:
    if operator == "Null":
        absent = key not in context
        return any(str(value).lower() == ("true" if absent else "false") for value in _as_list(expected))
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    if key not in context:
        return if_exists or base in _NEGATED
    actual = [str(value) for value in _as_list(context[key])]
    patterns = [str(value) for value in _as_list(expected)]
    if base == "Bool":
        return any(a.lower() == p.lower() for a in actual for p in patterns)
    if base in _NEGATED:
        match = _STRING_OPERATORS[_NEGATED[base]]
        return not any(match(p, a) for a in actual for p in patterns)
    if base in _STRING_OPERATORS:
        return any(_STRING_OPERATORS[base](p, a) for a in actual for p in patterns)
    raise NotImplementedError(f"tests/support/iam_policy.py: condition operator {operator!r} is not evaluated here")


def conditions_hold(condition: dict | None, context: dict[str, Any]) -> bool:
    return all(_operator_holds(operator, key, expected, context)
               for operator, keys in (condition or {}).items() for key, expected in keys.items())


def _matches(statement: dict, positive: str, negative: str, value: str, *, ignore_case: bool) -> bool:
    if positive in statement:
        return any(_wildcard(p, value, ignore_case=ignore_case) for p in _as_list(statement[positive]))
    if negative in statement:
        return not any(_wildcard(p, value, ignore_case=ignore_case) for p in _as_list(statement[negative]))
    return True  # a trust policy's statements name a Principal instead of a Resource


@dataclass(frozen=True)
class Request:
    """One authorization question: an action on a resource, with the request's condition keys."""

    action: str
    resource: str = "*"
    context: dict[str, Any] | None = None
    principal_service: str | None = None
    """For trust policies: the service principal asking (sts:AssumeRole by eks.amazonaws.com, say)."""


def _principal_matches(statement: dict, request: Request) -> bool:
    if "Principal" not in statement or request.principal_service is None:
        return True
    services = _as_list((statement["Principal"] or {}).get("Service", []))
    return request.principal_service in services


def decide(policies: Iterable[str | dict], request: Request) -> str:
    """"Allow", "ExplicitDeny" or "ImplicitDeny" for `request` under `policies` (JSON strings or dicts)."""
    allowed = False
    for policy in policies:
        document = json.loads(policy) if isinstance(policy, str) else policy
        for statement in _as_list(document["Statement"]):
            if not (_matches(statement, "Action", "NotAction", request.action, ignore_case=True)
                    and _matches(statement, "Resource", "NotResource", request.resource, ignore_case=False)
                    and _principal_matches(statement, request)
                    and conditions_hold(statement.get("Condition"), request.context or {})):
                continue
            if statement["Effect"] == "Deny":
                return "ExplicitDeny"
            allowed = True
    return "Allow" if allowed else "ImplicitDeny"


def allows(policies: Iterable[str | dict], request: Request) -> bool:
    return decide(policies, request) == "Allow"

