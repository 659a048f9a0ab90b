import pytest

from corral.sources import DEFAULT_SOURCE_LIMITS, SourceLimits


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="text_bytes"):
        SourceLimits(text_bytes=0)
    with pytest.raises(ValueError, match="max_count"):
        SourceLimits(max_count=True)
    with pytest.raises(ValueError, match="total_bytes"):
        SourceLimits(total_bytes=1.5)  # type: ignore[arg-type]


def test_defaults_bound_text_below_what_one_registry_holds() -> None:
    limits = DEFAULT_SOURCE_LIMITS
    assert limits == SourceLimits()
    assert limits.text_bytes < limits.total_bytes
    assert limits.attachment_bytes + limits.text_bytes <= limits.total_bytes
