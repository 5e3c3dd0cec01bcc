"""Operator replicas' peering settings (rara.operator.peering; the two-replica hand-over
against a real API server is tests/k8s/test_operator_peering.py)."""

from __future__ import annotations

import kopf
import pytest
from pydantic import ValidationError

from rara.operator.peering import Peering, configure, start_priority
from rara.operator.settings import OperatorSettings


def test_the_older_replica_outranks_the_younger() -> None:
    older, younger = start_priority(now=1_800_000_000.0), start_priority(now=1_800_000_000.002)
    assert 0 > older > younger
    assert abs(older) < 2**53  # exact as a JSON number in the peering object
    # The sub-millisecond part keeps replicas started in the same millisecond apart
    # (kopf pauses every replica of equal priority).
    assert len({start_priority(now=1_800_000_000.0) for _ in range(50)}) > 1


def test_standalone_without_a_peering() -> None:
    settings = kopf.OperatorSettings()
    configure(settings, None)
    assert settings.peering.standalone


def test_peered() -> None:
    settings = kopf.OperatorSettings()
    configure(settings, Peering("rara-operator", None, 4))
    peering = settings.peering
    assert (peering.standalone, peering.mandatory, peering.name, peering.lifetime) == (
        False,
        True,
        "rara-operator",
        4,
    )
    assert peering.priority < 0
    configure(settings, Peering("rara-operator", 7))
    assert settings.peering.priority == 7  # by hand: above every default priority


def test_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OperatorSettings.load().peering() is None
    monkeypatch.setenv("RARA_OPERATOR_PEERING_NAME", "rara-operator")
    monkeypatch.setenv("RARA_OPERATOR_PEERING_LIFETIME", "5")
    assert OperatorSettings.load().peering() == Peering("rara-operator", None, 5)
    monkeypatch.setenv("RARA_OPERATOR_PEERING_LIFETIME", "2")
    with pytest.raises(ValidationError, match="peering_lifetime"):
        OperatorSettings.load()
