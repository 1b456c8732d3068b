"""The error summary both CPU engine benchmarks print (Hugging Face: :mod:`.engine_hf`; llama.cpp:
:mod:`.engine_llamacpp`): geomean and max |error| of TPOT, max |error| of TTFT, the count of points not reliable,
and the machine-readable last line :data:`LAST_LINE_RE` matches.

Lessons: none
"""

from __future__ import annotations

import math
import re
import statistics

__all__ = ["LAST_LINE_RE", "EngineErrors"]

LAST_LINE_RE = re.compile(r"^engine_tpot_geomean_abs_error=\d+\.\d+ engine_tpot_max_abs_error=\d+\.\d+ "
                          r"engine_ttft_max_abs_error=\d+\.\d+$")


class EngineErrors:
    """Mixin of a report whose ``points`` each carry ``kind`` ("tpot"/"ttft"), ``error`` and ``verdict``."""

    def _of(self, kind):
        return [p for p in self.points if p.kind == kind]

    @property
    def tpot_geomean_abs_error(self) -> float:
        errs = [max(abs(p.error), 1e-12) for p in self._of("tpot")]
        return statistics.geometric_mean(errs) if errs else math.nan

    @property
    def tpot_max_abs_error(self) -> float:
        return max((abs(p.error) for p in self._of("tpot")), default=math.nan)

    @property
    def ttft_max_abs_error(self) -> float:
        return max((abs(p.error) for p in self._of("ttft")), default=math.nan)

    @property
    def noisy_points(self) -> int:
        return sum(p.verdict != "reliable" for p in self.points)

    def last_line(self) -> str:
        return (f"engine_tpot_geomean_abs_error={self.tpot_geomean_abs_error:.3f} "
                f"engine_tpot_max_abs_error={self.tpot_max_abs_error:.3f} "
                f"engine_ttft_max_abs_error={self.ttft_max_abs_error:.3f}")
