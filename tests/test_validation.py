"""course_lib.validation.require_counts: the one check behind every list of token counts."""
import pytest

from course_lib.core.validation import require_counts


def test_require_counts_accepts_lists_and_a_bare_count_only_when_allowed():
    assert require_counts("contexts", (128, 1024)) == [128, 1024]
    assert require_counts("contexts", 128, single=True) == [128]
    with pytest.raises(TypeError, match="contexts must be a list of token counts"):
        require_counts("contexts", 128)
    with pytest.raises(TypeError, match="prompt_lengths"):
        require_counts("prompt_lengths", "128", single=True)
    with pytest.raises(ValueError, match="at least one"):
        require_counts("contexts", [])
    with pytest.raises(ValueError, match="contexts"):
        require_counts("contexts", [128, 0])
