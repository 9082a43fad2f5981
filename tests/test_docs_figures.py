"""README's measured figures are the docs' figures: each bullet of README's **Measured** list links
the docs section its figures come from, and every number of each figure (a value with its unit:
×, %, s, ms, µs, GiB, MiB, fps, streams) is in that section. A figure changed on one side only
fails here. No server: the files alone."""

from __future__ import annotations

import re

import pytest

from environment import REPO_ROOT

README = REPO_ROOT / "README.md"
LINK = re.compile(r"\]\(((?:docs/)?[\w/.-]+\.md)#([\w-]+)\)")
# A figure: a number or a range of two, with its unit.
FIGURE = re.compile(
    r"(\d+(?:[.,]\d+)*)(?:\s*[–-]\s*(\d+(?:[.,]\d+)*))?\s*(×|%|ms\b|µs\b|s\b|GiB\b|MiB\b|fps\b|streams\b)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s", "-", text)


def _section(path, anchor: str) -> str:
    """The text under the heading whose anchor is `anchor`, up to the next heading of its level
    or above."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        found = re.match(r"^(#+)\s+(.*)", line)
        if found and _slug(found.group(2)) == anchor:
            level = len(found.group(1))
            end = next((j for j in range(i + 1, len(lines))
                        if re.match(rf"^#{{1,{level}}}\s", lines[j])), len(lines))
            return "\n".join(lines[i:end])
    raise AssertionError(f"{path.name} has no heading with the anchor #{anchor}")


def _measured() -> list[str]:
    """README's **Measured** bullets, each as one line."""
    text = README.read_text()
    block = text.split("**Measured**", 1)[1].split("\n## ", 1)[0]
    return [" ".join(b.split()) for b in re.split(r"\n- ", block)[1:]]


@pytest.mark.parametrize("bullet", _measured(), ids=lambda b: b[:40])
def test_each_readme_figure_is_in_the_section_it_links(bullet):
    links = LINK.findall(bullet)
    assert links, f"README's figure links no docs section: {bullet}"
    sections = "\n".join(_section(REPO_ROOT / (p if p.startswith("docs/") else f"docs/{p}"), a)
                         for p, a in links)
    prose = LINK.sub("](", bullet)  # the links' own text holds no figure
    missing = [m.group(0) for m in FIGURE.finditer(prose) if not _stated(m, sections)]
    assert not missing, f"not in {[f'{p}#{a}' for p, a in links]}: {missing}\n{bullet}"


def _stated(figure: re.Match, text: str) -> bool:
    """Each number of `figure` is in `text` with the figure's unit a few characters after it
    (in the same table cell or sentence: "1.62×", "8.9 s", "6.5 to 8.9 s", "+1,360 MiB")."""
    unit = re.escape(figure.group(3))
    after = rf"(?![\d.,])(?:[^\n|]{{0,16}}?\d)?\s?{unit}(?![A-Za-z])"
    return all(re.search(rf"(?<![\d.,]){re.escape(n)}{after}", text)
               for n in figure.groups()[:2] if n)


def test_the_check_can_fail(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# Top\n## Speed\n| run | x |\n|---|---|\n| a | 1.6× |\n## Next\n2.4×\n")
    section = _section(doc, "speed")
    [one, two] = FIGURE.finditer("1.6× and 2.4×")
    assert _stated(one, section) and not _stated(two, section)
    assert not _stated(next(FIGURE.finditer("1.6 s")), section), "another unit"
    assert not _stated(next(FIGURE.finditer("4 s")), "in 4 runs"), "a unit is a word"
    assert [m.groups()[:2] for m in FIGURE.finditer("1.6–1.7× and 29 streams")] == \
        [("1.6", "1.7"), ("29", None)]
