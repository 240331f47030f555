"""The ingest parsers and their registry: what each keeps, and errors that name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from evermind.errors import ConfigError, InputError
from evermind.ingest import PARSERS, Document, ParseOptions, ParserRegistry, Section, parse_rows
from evermind.ingest.registry import decode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ingest"
NO_OPTIONS = ParseOptions()


def parse(name: str, text: str, options: ParseOptions = NO_OPTIONS) -> Document:
    return PARSERS.get(name)(text, f"src.{name}", options)


# ---------------------------------------------------------------------- markdown


def test_markdown_sections_carry_their_heading_breadcrumbs() -> None:
    doc = PARSERS.get("markdown")(
        (FIXTURES / "docs" / "getting-started.md").read_text(), "gs.md", NO_OPTIONS
    )
    crumbs = [s.breadcrumbs for s in doc.sections]
    assert ("Lanternfish Guide", "Install", "Linux") in crumbs
    assert ("Lanternfish Guide", "Install", "Docker") in crumbs
    assert ("Lanternfish Guide", "Your first job") in crumbs
    assert doc.title == "Lanternfish Guide"
    assert doc.meta == {"title": "Lanternfish Guide", "product": "lanternfish"}  # front matter
    linux = next(s for s in doc.sections if s.breadcrumbs[-1] == "Linux")
    lines = (FIXTURES / "docs" / "getting-started.md").read_text().splitlines()
    assert lines[linux.line - 1].startswith("Download the tarball")  # the line is exact


def test_a_hash_line_inside_a_code_fence_is_not_a_heading() -> None:
    doc = parse(
        "markdown", "# Top\n\n```bash\n# a shell comment\necho hi\n```\n\n## Next\n\ntext\n"
    )
    assert [s.breadcrumbs for s in doc.sections] == [("Top",), ("Top", "Next")]
    assert "# a shell comment" in doc.sections[0].text


def test_setext_headings_and_levels_pop_the_breadcrumb_stack() -> None:
    text = (
        "Guide\n=====\n\nintro\n\nInstall\n-------\n\nsteps\n\n### Linux\n\napt\n\n## Use\n\nrun\n"
    )
    doc = parse("markdown", text)
    assert [s.breadcrumbs for s in doc.sections] == [
        ("Guide",),
        ("Guide", "Install"),
        ("Guide", "Install", "Linux"),
        ("Guide", "Use"),
    ]


def test_plain_text_is_one_section_without_breadcrumbs() -> None:
    doc = parse("text", "\n\nfirst paragraph\n\nsecond\n")
    assert doc.sections == (Section("first paragraph\n\nsecond", (), 3),)


# ---------------------------------------------------------------------- html


def test_html_keeps_main_text_and_title_and_drops_scripts_styles_nav() -> None:
    doc = PARSERS.get("html")((FIXTURES / "faq.html").read_text(), "faq.html", NO_OPTIONS)
    everything = "\n".join(s.text for s in doc.sections)
    assert doc.title == "Lanternfish FAQ"
    for gone in ("tracking pixel", "font-family", "Sign in", "Privacy", "Docs"):
        assert gone not in everything, gone  # script, style, nav, footer, header
    refund = next(s for s in doc.sections if s.breadcrumbs[-1] == "Can I get a refund?")
    assert refund.breadcrumbs == ("Frequently asked questions", "Billing", "Can I get a refund?")
    assert "within 30 days" in refund.text
    assert "50 % off" in everything.replace("\xa0", " ")  # &nbsp; decoded
    backup = next(s for s in doc.sections if "lanternd backup" in s.text and "```" in s.text)
    assert "```\nlanternd backup /var/backups" in backup.text  # <pre> kept as a fence
    assert "- Team plan: email, next business day" in everything  # list items


def test_html_without_main_reads_the_body_and_uses_the_title_as_crumb() -> None:
    doc = parse("html", "<title>Notes</title><body><p>one <b>bold</b> word</p><p>two</p></body>")
    assert doc.sections == (Section("one bold word\n\ntwo", ("Notes",), 1),)


# ---------------------------------------------------------------------- json / csv


def test_jsonl_fields_become_text_and_the_rest_metadata() -> None:
    text = (FIXTURES / "changelog.jsonl").read_text()
    doc = PARSERS.get("jsonl")(text, "cl.jsonl", ParseOptions(fields=("title", "notes")))
    assert len(doc.sections) == 40
    first = doc.sections[0]
    assert first.text.startswith("Faster lease queries on the SQLite journal\n\n")
    assert first.meta["fields"]["version"] == "2.0.0" and first.meta["fields"]["breaking"]
    assert "title" not in first.meta["fields"] and first.line == 1
    assert doc.sections[5].line == 6


def test_jsonl_bad_line_names_the_file_and_line() -> None:
    with pytest.raises(InputError, match=r"cl\.jsonl: line 3: bad JSON"):
        PARSERS.get("jsonl")('{"a": "x y"}\n\n{"a": "oops",\n', "cl.jsonl", NO_OPTIONS)
    with pytest.raises(InputError, match="line 1: expected a JSON object, got list"):
        PARSERS.get("jsonl")("[1, 2]\n", "cl.jsonl", NO_OPTIONS)


def test_json_array_and_dotted_fields_and_unknown_field() -> None:
    text = '[{"q": "How?", "a": {"text": "Like so."}, "id": 1}, {"q": "Why?", "id": 2}]'
    doc = parse("json", text, ParseOptions(fields=("q", "a.text")))
    assert [s.text for s in doc.sections] == ["How?\n\nLike so.", "Why?"]
    assert doc.sections[0].meta == {"fields": {"id": 1}}
    with pytest.raises(InputError, match=r"no record has the field 'answer'.*\['a', 'id', 'q'\]"):
        parse("json", text, ParseOptions(fields=("answer",)))
    with pytest.raises(InputError, match=r"src\.json: line 1, column \d+: bad JSON"):
        parse("json", "[{]")


def test_csv_text_columns_and_metadata() -> None:
    text = (FIXTURES / "tickets.csv").read_text()
    doc = PARSERS.get("csv")(text, "tickets.csv", ParseOptions(columns=("subject", "body")))
    assert len(doc.sections) == 150
    ticket = next(s for s in doc.sections if s.meta["fields"]["id"] == "LF-1042")
    assert ticket.text.startswith("Webhook signature mismatch on dead-letter hook\n\n")
    assert ticket.meta["fields"]["customer"] == "Brightwave Foods"
    assert ticket.line == 43  # header on line 1, LF-1001 on line 2
    # Without --columns: the columns with prose (whitespace inside a value) are the text.
    guessed = PARSERS.get("csv")(text, "tickets.csv", NO_OPTIONS)
    assert "LF-1042" not in guessed.sections[41].text
    assert "Brightwave Foods" in guessed.sections[41].text


def test_csv_errors_name_the_line() -> None:
    with pytest.raises(InputError, match=r"t\.csv: line 3: 3 fields but the header names 2"):
        PARSERS.get("csv")("a,b\n1,2\n1,2,3\n", "t.csv", NO_OPTIONS)
    with pytest.raises(InputError, match=r"no column 'body'; the columns are \['a', 'b'\]"):
        PARSERS.get("csv")("a,b\n1,2\n", "t.csv", ParseOptions(columns=("body",)))


def test_tsv_and_row_iterables() -> None:
    doc = PARSERS.get("tsv")("title\tscore\nhello world\t3\n", "t.tsv", NO_OPTIONS)
    assert doc.kind == "tsv" and doc.sections == (
        Section("hello world", (), 2, {"fields": {"score": 3}}),  # a typed cell
    )
    rows = [{"title": "Disk full", "n": 3, "when": object}, {"title": "", "n": 4}]
    doc = parse_rows(rows, "query-1", columns=["title"])
    assert len(doc.sections) == 1  # the empty row is skipped
    assert doc.sections[0].meta["fields"]["n"] == 3
    assert isinstance(doc.sections[0].meta["fields"]["when"], str)  # made JSON-safe
    with pytest.raises(InputError, match="row 2: expected a mapping"):
        parse_rows([{"a": "x"}, ["a"]], "q")  # type: ignore[list-item]


# ---------------------------------------------------------------------- registry, decoding


def test_undecodable_bytes_name_the_line() -> None:
    with pytest.raises(InputError, match=r"notes\.txt: line 2: undecodable bytes at offset 7"):
        decode(b"fine\nca\xe9f\n", "notes.txt")
    assert decode(b"\xef\xbb\xbfbom", "x") == "bom"


def test_unknown_type_names_the_file_and_the_known_types() -> None:
    with pytest.raises(InputError, match=r"slides\.pptx: unknown type \.pptx; known: .*\.md"):
        PARSERS.for_file("slides.pptx")


def test_users_register_their_own_parser() -> None:
    registry = ParserRegistry()

    def parse_org(text: str, source: str, options: ParseOptions) -> Document:
        sections = [Section(p, ("org",)) for p in text.split("* ") if p.strip()]
        return Document(source, "org", tuple(sections))

    registry.register("org", parse_org, [".ORG"])
    name, parser = registry.for_file("notes.org")
    assert name == "org" and parser("* a\n* b", "n.org", NO_OPTIONS).sections[1].text == "b"
    with pytest.raises(ConfigError, match="registered already"):
        registry.register("org", parse_org)
    with pytest.raises(ConfigError, match="parsed by 'org' already"):
        registry.register("org2", parse_org, [".org"])
    with pytest.raises(ConfigError, match="must start with a dot"):
        registry.register("org3", parse_org, ["org"])
    with pytest.raises(ConfigError, match="no parser named 'nope'"):
        registry.get("nope")
