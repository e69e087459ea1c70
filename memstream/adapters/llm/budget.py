"""Per-tenant, per-UTC-day LLM token accounting. Pure: the caller passes the time, nothing is stored.

The budget is per worker process (``MEMSTREAM_LLM_DAILY_TOKEN_BUDGET``); a tenant that has spent its
day's tokens is deferred until the next UTC midnight instead of being billed further.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta


class LLMError(RuntimeError):
    """Base of the LLM layer's errors. Lives here (not in client.py) so the budget stays standalone."""


class BudgetExhausted(LLMError):
    """The tenant has spent today's token budget; consolidation should wait until ``resets_at``."""

    def __init__(self, tenant: str, resets_at: datetime) -> None:
        super().__init__(
            f"tenant {tenant!r} has spent its daily LLM token budget; it resets at {resets_at.isoformat()}"
        )
        self.tenant = tenant
        self.resets_at = resets_at


def utc_day(now: datetime) -> date:
    """The UTC calendar day of an aware datetime (a naive one is refused: its day would be a guess)."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"naive datetime {now.isoformat()}: pass an aware one (e.g. UTC)")
    return now.astimezone(UTC).date()


def next_utc_midnight(now: datetime) -> datetime:
    day = utc_day(now)
    return datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)


class TokenBudget:
    """``limit`` tokens per tenant per UTC day; 0 means unlimited (spend is still counted)."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"token budget must be >= 0, got {limit}")
        self.limit = limit
        # Only the newest day seen and the one before are kept, so memory stays bounded by the
        # number of tenants; yesterday survives to absorb small clock disagreements around midnight.
        self._days: dict[date, dict[str, int]] = {}
        self._totals: dict[str, int] = {}

    def spent(self, tenant: str, now: datetime) -> int:
        return self._days.get(utc_day(now), {}).get(tenant, 0)

    def remaining(self, tenant: str, now: datetime) -> int | None:
        if not self.limit:
            return None
        return max(0, self.limit - self.spent(tenant, now))

    def check(self, tenant: str, now: datetime) -> None:
        """Raise :class:`BudgetExhausted` when the tenant's spend today has reached the limit."""
        if self.limit and self.spent(tenant, now) >= self.limit:
            raise BudgetExhausted(tenant, next_utc_midnight(now))

    def spend(self, tenant: str, now: datetime, tokens: int) -> None:
        if tokens < 0:
            raise ValueError(f"cannot spend a negative number of tokens ({tokens})")
        day = utc_day(now)
        self._totals[tenant] = self._totals.get(tenant, 0) + tokens
        newest = max(self._days, default=day)
        oldest_kept = max(day, newest) - timedelta(days=1)
        if day < oldest_kept:
            return  # a day already forgotten (clock went back): it only counts in the totals
        per_tenant = self._days.setdefault(day, {})
        per_tenant[tenant] = per_tenant.get(tenant, 0) + tokens
        for old in [d for d in self._days if d < oldest_kept]:
            del self._days[old]

    def totals(self) -> dict[str, int]:
        """Tokens spent per tenant across all days, since this process started."""
        return dict(self._totals)
