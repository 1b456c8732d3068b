"""The simulator's inputs: arrival times (Poisson or a trace), request lengths, and the limits on one simulation's size.

Lessons: 10
"""
from __future__ import annotations

import numbers
import random

from course_lib.core.validation import require_count, require_list, require_nonnegative, require_positive

#: The most requests one simulation takes.
MAX_REQUESTS = 10**6
#: The most scheduling work (sequence-steps: one per decode token, one per prefill chunk) one simulation does.
MAX_WORK = 10**8


class SimulationTooLarge(ValueError):
    """A simulation refused (or stopped) because its work would exceed :data:`MAX_REQUESTS` / :data:`MAX_WORK`."""




# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------
def _lengths(name: str, spec, n: int, rng: random.Random) -> list[int]:
    """``n`` lengths: an int (fixed), a ``(lo, hi)`` tuple (uniform integers, both included) or a list.

    A list of exactly ``n`` values is used in order (a trace); any other list is sampled with
    replacement (its empirical distribution).
    """
    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise ValueError(f"{name} as a tuple must be (lo, hi), a uniform range; got {len(spec)} items "
                             f"(pass a list for a list of lengths)")
        lo = require_count(f"{name}[0]", spec[0], minimum=1)
        hi = require_count(f"{name}[1]", spec[1], minimum=1)
        if hi < lo:
            raise ValueError(f"{name} = (lo, hi) needs lo <= hi, got ({lo}, {hi})")
        return [rng.randint(lo, hi) for _ in range(n)]
    if isinstance(spec, (list, range)):
        if not spec:
            raise ValueError(f"{name} must not be an empty list")
        if len(spec) > MAX_REQUESTS:
            raise SimulationTooLarge(f"{name} holds {len(spec):,} lengths; at most {MAX_REQUESTS:,} are accepted")
        values = [require_count(name, v, minimum=1) for v in spec]
        if len(values) == n:
            return values
        return [rng.choice(values) for _ in range(n)]
    if isinstance(spec, bool) or not isinstance(spec, numbers.Real):
        raise TypeError(f"{name} must be a token count, a (lo, hi) tuple or a list of counts, "
                        f"got {type(spec).__name__}")
    v = require_count(name, spec, minimum=1)
    return [v] * n


def _arrival_times(arrival_rate, requests, arrivals, seed) -> list[float]:
    if arrivals is not None:
        arrivals = require_list("arrivals", arrivals, "a list of arrival times in seconds",
                                maximum_items=MAX_REQUESTS + 1)
        if len(arrivals) > MAX_REQUESTS:
            raise SimulationTooLarge(f"arrivals holds {len(arrivals):,} requests; at most {MAX_REQUESTS:,} "
                                     f"are simulated")
        times = [require_nonnegative("arrivals", a) for a in arrivals]
        if not times:
            raise ValueError("arrivals must hold at least one arrival time")
        if any(b < a for a, b in zip(times, times[1:])):
            raise ValueError("arrivals must be sorted in non-decreasing order (seconds from the start)")
        if arrival_rate is not None:
            raise ValueError("arrival_rate must be None when arrivals= gives the arrival times (a trace)")
        if requests is not None and require_count("requests", requests, minimum=1) != len(times):
            raise ValueError(f"requests ({requests}) must equal len(arrivals) ({len(times)}) or be None")
        return times
    if arrival_rate is None:
        raise ValueError("arrival_rate (requests/s, > 0) is required unless arrivals= gives a trace")
    rate = require_positive("arrival_rate", arrival_rate)
    if requests is None:
        raise ValueError("requests (how many requests to simulate, >= 1) is required with an arrival_rate")
    if isinstance(requests, numbers.Integral) and requests > MAX_REQUESTS:
        raise SimulationTooLarge(f"requests = {requests:,} is more than one simulation takes (at most "
                                 f"{MAX_REQUESTS:,} requests): simulate a sample of the traffic")
    n = require_count("requests", requests, minimum=1, maximum=MAX_REQUESTS)
    rng = random.Random(f"{seed}:arrivals")  # its own stream: the same draws at every rate
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(1.0) / rate
        out.append(t)
    return out



def _as_list(name, values) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range)):
        raise TypeError(f"{name} must be a list of token counts, got {type(values).__name__}")
    if not values:
        raise ValueError(f"{name} must hold at least one token count")
    return list(values)
