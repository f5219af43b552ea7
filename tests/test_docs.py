"""The documentation covers the command line (sqlite-utils' docs discipline): every command has
help text, a guide that uses it and a place in the generated reference with every one of its
options; every key of the evaluate object says what it means; the README keeps its quick start;
and the README and the documentation use no words of the project's own history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainplan.interface.cli import cli, register_commands
from trainplan.interface.cli.reference import (
    JSON_RUNS,
    cli_markdown,
    json_keys,
    key_doc,
    option_names,
    run_json,
)

register_commands()
ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {p: p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))}
GUIDES = "\n".join(text for p, text in DOCS.items() if "reference" not in p.parts)
REFERENCE = cli_markdown()


def test_quick_start_commands_in_readme():
    assert (
        "pip install -e . && trainplan search --model llama3-405b --gpus 16384 --gpu H100-SXM"
        in README
    )
    assert "pip install -e '.[test]' && python -m pytest" in README


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_command_documented(name):
    """Help text, a guide or concept page that shows it, and a section of the reference."""
    command = cli.commands[name]
    assert command.help and command.help.strip()
    assert f"trainplan {name}" in GUIDES, f"no guide shows `trainplan {name}`"
    assert f"## trainplan {name}\n" in REFERENCE


def test_every_option_in_the_reference():
    reference = REFERENCE
    sections = dict(re.findall(r"## trainplan (\S+)\n(.*?)(?=\n## trainplan |\Z)", reference, re.S))
    assert set(sections) == set(cli.commands)
    for name, options in option_names().items():
        for option in options:
            assert re.search(rf"`[^`]*{re.escape(option)}\b", sections[name]), (name, option)
        for param in cli.commands[name].params:
            if param.param_type_name == "option":
                assert getattr(param, "help", None), f"trainplan {name} {param.opts[0]}: no help"


def test_reference_pages_in_the_site():
    """The reference pages hold the generated markers the site's hook replaces."""
    assert "<!-- generated: cli -->" in DOCS[ROOT / "docs" / "reference" / "cli.md"]
    assert "<!-- generated: json -->" in DOCS[ROOT / "docs" / "reference" / "json.md"]
    nav = (ROOT / "mkdocs.yml").read_text()
    for path in DOCS:
        rel = path.relative_to(ROOT / "docs").as_posix()
        assert rel in nav, f"{rel} is not in mkdocs.yml's nav"


def test_every_evaluate_key_says_what_it_means():
    obj = run_json(JSON_RUNS["evaluate"])
    missing = [path for path, _ in json_keys(obj) if key_doc(path) is None]
    assert not missing, f"keys without a meaning in interface/cli/reference.py KEY_DOCS: {missing}"


INTERNAL = re.compile(
    r"\bthe seed\b|\bseed's\b|\bissue \d+|\bissues \d+|\bsession\b|review found|SPEC\.md|"
    r"DESIGN\.md|SEED\.md|\.\./shared",
    re.I,
)


@pytest.mark.parametrize("path", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_no_internal_words(path):
    """Written for users who never heard of the project's history."""
    found = INTERNAL.findall(path.read_text())
    assert not found, f"{path.name}: {found}"


def test_no_internal_words_in_the_cli_reference():
    """The help texts the reference is generated from."""
    assert not INTERNAL.findall(REFERENCE)
