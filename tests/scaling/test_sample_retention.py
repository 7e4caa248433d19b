"""Per-tick samples are kept SIGNAL_SAMPLE_RETENTION_DAYS (issue 18, load: the database stays bounded); a
tick deletes at most a batch, oldest first, so a backlog drains over ticks instead of stalling one."""
from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from controlplane.models import Pool
from scaling import loop
from scaling.models import SignalSample


def _samples(pool: Pool, now, ages_h: list[float]) -> None:  # noqa: ANN001
    SignalSample.objects.bulk_create(SignalSample(pool=pool, at=now - timedelta(hours=h), request_rate_rps=1.0)
                                     for h in ages_h)


def _ages_h(now) -> list[float]:  # noqa: ANN001
    return sorted(round((now - at).total_seconds() / 3600, 2) for at in SignalSample.objects.values_list("at", flat=True))


def test_the_tick_deletes_samples_past_the_retention_and_keeps_the_rest(pool: Pool, settings) -> None:  # noqa: ANN001
    settings.SIGNAL_SAMPLE_RETENTION_DAYS = 9
    now = timezone.now()
    _samples(pool, now, [1, 24 * 8, 24 * 9 - 1, 24 * 9 + 1, 24 * 30])
    loop.tick(pools=[], now=now)
    assert _ages_h(now) == [1, 24 * 8, 24 * 9 - 1]
    settings.SIGNAL_SAMPLE_RETENTION_DAYS = 8  # a shorter retention applies at the next tick
    loop.tick(pools=[], now=now)
    assert _ages_h(now) == [1, 24 * 8]


def test_a_tick_deletes_at_most_a_batch_oldest_first(pool: Pool, settings) -> None:  # noqa: ANN001
    settings.SIGNAL_SAMPLE_RETENTION_DAYS = 9
    now = timezone.now()
    _samples(pool, now, [1, 24 * 10, 24 * 11, 24 * 12, 24 * 13, 24 * 14])
    assert loop.prune_samples(now, batch=2) == 2
    assert _ages_h(now) == [1, 24 * 10, 24 * 11, 24 * 12]
    assert loop.prune_samples(now, batch=2) == 2 and loop.prune_samples(now, batch=2) == 1
    assert loop.prune_samples(now, batch=2) == 0 and _ages_h(now) == [1]

