"""Probes: a real capacity reservation per AZ, created and cancelled at once, the only definite answer.

Every reservation is recorded the moment AWS returns it and cancelled on the way out, whether the loop ends, raises
or is interrupted; each also expires by itself (PROBE_LIFETIME) should this process be killed outright.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, TextIO

from botocore.exceptions import BotoCoreError, ClientError

from infra.aws.capacity_reservation import CAPACITY_ERROR_CODES, QUOTA_ERROR_CODES, error_code, reservation_request
from tools.capacity.aws import Aws, describe_failure
from tools.capacity.survey import AzReport
from workload import cli

PROBE_TAG_KEY = "raytrain:capacity-probe"
# A probe outlives this process only if it is killed outright (SIGKILL, power loss); then it expires by itself
# (EC2 ends a limited reservation within an hour of its end date).
PROBE_LIFETIME = timedelta(hours=1)


class SignalGuard:
    """Turns SIGINT, SIGTERM and SIGHUP into KeyboardInterrupt, held back inside `hold()`.

    Held back, because an interrupt between CreateCapacityReservation's answer and the line that records the
    reservation would leave one that nothing cancels; and a second Ctrl-C must not cut the cleanup short.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._holding = False
        self._pending: int | None = None

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame) -> None:
        if self._holding:
            self._pending = signum
            return
        raise KeyboardInterrupt(signal.Signals(signum).name)

    @contextmanager
    def hold(self):
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self._pending is not None:
            signum, self._pending = self._pending, None
            raise KeyboardInterrupt(signal.Signals(signum).name)


class ProbeError(cli.EnvironmentProblem):
    """AWS refused a probe for a reason that no other AZ would change (permissions, a bad request)."""


def probe(aws: Aws, azs: list[AzReport], instance_type: str, count: int, *, run_id: str,
          log: TextIO) -> list[str]:
    """Creates and at once cancels a reservation for the nodes in each AZ; sets `probe_ok` on each.

    Returns the reservations that could not be cancelled (each also printed to `log` with its command).

    Every reservation is recorded before anything else can happen, and whatever is recorded is cancelled on
    the way out, whether the loop ends, raises, or is interrupted.
    """
    end_date = datetime.now(timezone.utc) + PROBE_LIFETIME
    tags = {PROBE_TAG_KEY: run_id, "Name": f"raytrain-capacity-probe-{run_id}"}
    outstanding: dict[str, str] = {}  # reservation id -> region
    with SignalGuard() as guard:
        try:
            for az in azs:
                request = reservation_request(instance_type=instance_type, instance_count=count,
                                              availability_zone=az.availability_zone, tags=tags,
                                              end_date=end_date)
                with guard.hold():
                    try:
                        answer = aws.reservations(az.region).create_capacity_reservation(**request)
                    except ClientError as error:
                        code = error_code(error)
                        if code not in CAPACITY_ERROR_CODES and code not in QUOTA_ERROR_CODES:
                            raise ProbeError(f"--probe: {az.availability_zone}: {describe_failure(error)}") from error
                        az.probe_ok = False
                        az.notes.append(f"probe: {code}")
                        print(f"probe {az.availability_zone}: {code}", file=log)
                        continue
                    reservation_id = answer["CapacityReservation"]["CapacityReservationId"]
                    outstanding[reservation_id] = az.region
                az.probe_ok = True
                print(f"probe {az.availability_zone}: reserved {reservation_id}", file=log)
                with guard.hold():
                    _cancel_all(aws, outstanding, log)  # a failed cancel stays outstanding for the last try
        finally:
            with guard.hold():
                _cancel_all(aws, outstanding, log, last_try=True)
    return sorted(outstanding)


def _cancel_all(aws: Aws, outstanding: dict[str, str], log: TextIO, *, last_try: bool = False) -> None:
    for reservation_id, region in list(outstanding.items()):
        try:
            aws.reservations(region).cancel_capacity_reservation(CapacityReservationId=reservation_id)
        except (ClientError, BotoCoreError) as error:
            if not last_try:
                print(f"probe {reservation_id}: cancel failed ({describe_failure(error)}), trying again", file=log)
                continue
            print(f"WARNING: probe reservation {reservation_id} in {region} is NOT cancelled "
                  f"({describe_failure(error)}); it expires by itself within {PROBE_LIFETIME * 2}, or run:\n"
                  f"  aws ec2 cancel-capacity-reservation --region {region} "
                  f"--capacity-reservation-id {reservation_id}", file=log)
        else:
            del outstanding[reservation_id]
            print(f"probe {reservation_id}: cancelled", file=log)


