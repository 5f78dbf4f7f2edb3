"""The documentation site (issue 52): generated pages that cannot drift, an entry for every command,
setting and error message, no absolute path of a developer's machine, and a strict build."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from markdown.extensions.toc import slugify

from acidclean.cli import main
from acidclean.docsgen import error_messages
from acidclean.docsgen.pages import CLI_PAGE, SETTINGS_PAGE, TROUBLESHOOTING_PAGE, generated
from acidclean.docsgen.troubleshooting import ADVICE, START, message_cell
from acidclean.shared.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
# /tmp, /root, /home, /work, /Users of somebody's machine, not part of a URL or a relative path; a
# placeholder (<folder>, <checkout>) goes in their place.
MACHINE_PATH = re.compile(r"(?<![\w./<>-])/(?:tmp|root|home|work|Users)/[^\s`)\"']*")
# Kerberos' own default ticket cache: the same name on every machine, not a developer's path.
NOT_MACHINE_PATHS = ("/tmp/krb5cc_",)
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
HTML_TAGS = set(
    [
        "a",
        "abbr",
        "article",
        "aside",
        "b",
        "blockquote",
        "body",
        "br",
        "button",
        "code",
        "dd",
        "del",
        "details",
        "div",
        "dl",
        "dt",
        "em",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "head",
        "header",
        "hr",
        "html",
        "i",
        "img",
        "input",
        "label",
        "li",
        "link",
        "main",
        "meta",
        "nav",
        "ol",
        "p",
        "path",
        "pre",
        "script",
        "section",
        "small",
        "span",
        "strong",
        "sub",
        "summary",
        "sup",
        "svg",
        "table",
        "tbody",
        "td",
        "th",
        "thead",
        "title",
        "tr",
        "u",
        "ul",
    ]
)


def _page(path: Path) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def _documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "mkdocs.yml", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", [CLI_PAGE, SETTINGS_PAGE, TROUBLESHOOTING_PAGE], ids=str)
def test_a_generated_page_is_what_the_code_makes_of_it(page: Path) -> None:
    assert _page(page) == generated(ROOT)[page], f"{page} is stale: run `python -m acidclean.docsgen` (make docs)"


def _commands(group: click.Group, prefix: str) -> list[str]:
    paths = []
    for name, command in group.commands.items():
        paths.append(f"{prefix} {name}")
        if isinstance(command, click.Group):
            paths += _commands(command, f"{prefix} {name}")
    return paths


def test_every_command_has_an_entry_in_the_cli_reference() -> None:
    page = _page(CLI_PAGE)
    commands = _commands(main, "acidclean")
    assert len(commands) >= 14
    missing = [path for path in commands if not re.search(rf"^#+ `{re.escape(path)}`$", page, flags=re.M)]
    assert not missing, f"commands without an entry in {CLI_PAGE}: {missing}"


def test_every_command_has_a_line_in_the_readme() -> None:
    readme = _page(Path("README.md"))
    missing = [name for name in main.commands if f"| `acidclean {name}" not in readme]
    assert not missing, f"commands without a line in README.md's table of commands: {missing}"


def test_every_option_of_a_command_is_in_its_entry() -> None:
    page = _page(CLI_PAGE)
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[0] in page, f"acidclean {name} {param.opts[0]} is not in {CLI_PAGE}"


def test_every_setting_has_an_entry_with_its_environment_variable() -> None:
    page = _page(SETTINGS_PAGE)
    for name in Settings.model_fields:
        row = next((line for line in page.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, f"setting {name} has no entry in {SETTINGS_PAGE}"
        variable = f"{ENV_PREFIX}{name.upper()}" + ("_<NAME>" if name == "kafka" else "")
        assert f"`{variable}`" in row, row


def test_the_hive_names_of_settings_are_given() -> None:
    page = _page(SETTINGS_PAGE)
    row = next(line for line in page.splitlines() if line.startswith("| `cleanup_interval_ms` |"))
    assert "`hive.compaction-cleanup-interval`" in row and "ms" in row
    assert "`hive.metastore.uris`" in page and "`hive.compactor.delta.num.threshold`" in page


def test_every_error_message_the_code_can_print_has_an_entry() -> None:
    messages = error_messages.collect(ROOT)
    assert len(messages) > 100  # the collector finds the code's messages, not nothing
    page = _page(TROUBLESHOOTING_PAGE)
    listed = page[page.index(START) :]
    missing = [message.template for message in messages if message_cell(message.template) not in listed]
    assert not missing, f"error messages without an entry in {TROUBLESHOOTING_PAGE}: {missing[:5]}"
    assert {m.kind for m in messages} <= set(ADVICE)


def test_the_collector_sees_a_new_message(tmp_path: Path) -> None:
    for folder in error_messages.SOURCE_DIRS:
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "shared" / "errors.py").write_text("class AcidCleanError(Exception): ...\n")
    (tmp_path / "shared" / "x.py").write_text(
        "from shared.errors import AcidCleanError\n"
        "class ThingError(AcidCleanError): ...\n"
        "def f(name):\n"
        "    raise ThingError(f'no thing {name} here: ' + 'create it')\n"
    )
    [message] = error_messages.collect(tmp_path)
    assert (message.kind, message.template, message.modules) == (
        "ThingError",
        "no thing <name> here: create it",
        ("shared/x.py",),
    )


def test_no_absolute_path_of_a_machine_in_the_readme_or_the_docs() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match}"
        for path in _documents()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in MACHINE_PATH.findall(line)
        if not match.startswith(NOT_MACHINE_PATHS)
    ]
    assert not found, "absolute machine paths (use a placeholder such as <folder>):\n" + "\n".join(found)


def test_the_machine_path_check_finds_one() -> None:
    assert MACHINE_PATH.findall("stack started in /tmp/firsthour/.stack at file:/work/main/x") == [
        "/tmp/firsthour/.stack",
        "/work/main/x",
    ]
    assert not MACHINE_PATH.findall("s3a://bucket/tmp/x, <folder>/tmp/y, deploy/work/z, hdfs://nn/home/w")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slugify(heading, "-") for heading in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_the_readme_links_resolve_with_their_anchors() -> None:
    for target in MARKDOWN_LINK.findall(_page(Path("README.md"))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README.md links to {path}, which does not exist"
        if anchor:
            assert anchor in _anchors(ROOT / path), f"README.md links to {target}: no such heading"


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    """mkdocs.yml's validation makes a broken link or anchor a warning, and strict makes it fail."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()
    # A placeholder such as <folder> written outside a code span is swallowed as an unknown HTML tag.
    unknown = {
        f"{page.relative_to(tmp_path / 'site')}: <{tag}>"
        for page in (tmp_path / "site").rglob("*.html")
        for tag in re.findall(r"<([a-zA-Z][\w.-]*)[\s>/]", page.read_text(encoding="utf-8"))
        if tag.lower() not in HTML_TAGS
    }
    assert not unknown, f"placeholders read as HTML (put them in `code`): {sorted(unknown)}"
