"""Write docs/configuration.md from the table of fields in corral/_config.py."""

from pathlib import Path

from corral._config import reference_markdown

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

if __name__ == "__main__":
    PAGE.write_text(reference_markdown())
    print(f"wrote {PAGE}")
