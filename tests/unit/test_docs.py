"""The user docs name only things that exist: every `tidemark` command the README shows parses, every make
target it names is in the Makefile, and every file, module and test the docs point at is in the tree. A
rename in the code that leaves a doc behind fails here, naming the doc and the stale name."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tidemark.observability import METRICS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/DESIGN.md", "docs/OPERATIONS.md", "docs/CONFIGURATION.md", "docs/OBJECT_STORAGE_NOTES.md"]
PACKAGES = ("tidemark", "tidemark_airflow", "tidemark_cli", "tidemark_spark")
NOT_CODE = {"tidemark.ledger.schemaVersion"}  # a Delta table property, spelled like a module
NOT_CODE |= {metric.name for metric in METRICS}  # metric names (tidemark.observability), spelled likewise


def text(doc: str) -> str:
    return (ROOT / doc).read_text()


def fenced_lines(doc: str) -> list[str]:
    return [line for block in re.findall(r"```[a-z]*\n(.*?)```", text(doc), re.S) for line in block.splitlines()]


def inline_spans(doc: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text(doc), flags=re.S))


COMMAND = re.compile(r"(?:^|\s|/)tidemark\s+((?:pipelines|offsets|lag|run|ledger|audit|dead-letters)\b.*)")


def subcommands() -> dict[tuple[str, ...], set[str]]:
    """Each command path of the CLI (``("offsets", "reset")``) with its option strings."""
    from tidemark_cli.main import build_parser

    found = {}

    def walk(parser, path):
        for action in parser._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
        found[path] = {o for a in parser._actions for o in a.option_strings}

    walk(build_parser(), ())
    return found


def test_every_command_in_the_readme_parses_and_the_readme_lists_them_all():
    """The command lines of the README's code blocks, as a user would type them."""
    from tidemark_cli.main import build_parser

    shown = set()
    for line in fenced_lines("README.md"):
        match = COMMAND.search(line)
        if not match:
            continue
        args = shlex.split(match.group(1).split(" #")[0])
        try:
            build_parser().parse_args(args)
        except SystemExit as exc:
            pytest.fail(f"README.md: `tidemark {' '.join(args)}` does not parse (exit {exc.code})")
        shown.add(tuple(args[:2]) if args[0] in ("offsets", "pipelines", "ledger", "dead-letters") else (args[0],))
    groups = (("offsets",), ("pipelines",), ("ledger",), ("dead-letters",))
    commands = {path for path in subcommands() if path and path not in groups}
    assert commands <= shown, f"the README's command list misses {sorted(commands - shown)}"


ANY_COMMAND = re.compile(r"(?:^|\s|/)tidemark\s+([a-z][\w-]*)")


@pytest.mark.parametrize("doc", DOCS)
def test_every_word_the_docs_give_the_cli_as_a_command_is_one(doc):
    """`tidemark status` is not a command: a span of code that starts like a command must name one."""
    top = {path[0] for path in subcommands() if path}
    top.add("batch")  # not a command: `tidemark batch N`, the offset metadata of a mirrored consumer group
    for span in fenced_lines(doc) + inline_spans(doc):
        for word in ANY_COMMAND.findall(span):
            assert word in top, f"{doc}: `tidemark {word}` is not a command (the CLI has {sorted(top)})"


@pytest.mark.parametrize("doc", DOCS)
def test_every_tidemark_command_and_flag_the_docs_name_exists(doc):
    known = subcommands()
    segments = [part for span in fenced_lines(doc) + inline_spans(doc) for part in re.split(r"[;|]|\bor\b", span)]
    for segment in segments:
        match = COMMAND.search(segment)
        if not match:
            continue
        words = match.group(1).split(" #")[0].split()
        path = tuple(w for w in words[:2] if (*words[:words.index(w)], w) in known or (w,) in known)
        path = path if path in known else path[:1]
        assert path in known, f"{doc}: `tidemark {match.group(1)}` is not a command"
        flags = {w.split("=")[0] for w in words if w.startswith("--")}
        assert flags <= known[path], f"{doc}: `tidemark {match.group(1)}` uses unknown flags {flags - known[path]}"


def test_every_make_target_in_the_readme_exists():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"`make ([a-z][a-z0-9-]*)", text("README.md")))
    named |= set(re.findall(r"^make ([a-z][a-z0-9-]*)", "\n".join(fenced_lines("README.md")), re.M))
    assert named, "the README names no make target"
    assert not named - targets, f"README.md names make targets the Makefile lacks: {sorted(named - targets)}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_in_the_docs_exists(doc):
    paths = set(re.findall(r"(?<![\w./-])((?:tests|plugins|docs|scripts|dags|bench|devkit|jvm|config|spark_jobs)"
                           r"/[\w./-]*\w)", text(doc)))
    # bench/results/*.json are written by runs of the benchmark and the soak, not kept in the tree
    named = {p for p in paths if "<" not in p and not p.startswith("bench/results/")}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{doc} points at paths that do not exist: {missing}"


def _module_exists(dotted: str) -> bool:
    """``tidemark.batch.prepare`` (a module or package), or ``tidemark.run.PipelineRun`` (a name defined in
    one: a function, a class, a method or a module-level constant)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT / "plugins" / Path(*parts[:cut])
        source = next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.exists()), None)
        if source is None:
            continue
        if cut == len(parts):
            return True
        name = re.escape(parts[cut])
        return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^{name}\s*[:=]", source.read_text(),
                         re.M) is not None
    return False


@pytest.mark.parametrize("doc", DOCS)
def test_every_module_and_name_of_the_core_in_the_docs_exists(doc):
    names = set(re.findall(rf"`((?:{'|'.join(PACKAGES)})(?:\.\w+)+)", text(doc)))
    names |= set(re.findall(rf"`((?:{'|'.join(PACKAGES)})/[\w/]+)\.py`", text(doc)))
    missing = sorted(n for n in names - NOT_CODE if not _module_exists(n.replace("/", ".")))
    assert not missing, f"{doc} names modules or functions of the code that do not exist: {missing}"


def _test_names() -> set[str]:
    return {name for path in (ROOT / "tests").rglob("test_*.py")
            for name in re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.M)}


@pytest.mark.parametrize("doc", DOCS)
def test_every_test_the_docs_cite_exists(doc):
    cited = set(re.findall(r"\b(test_[a-z0-9_]+)\b(?!\.py)", text(doc)))
    cited -= {Path(p).stem for p in re.findall(r"test_[a-z0-9_]+\.py", text(doc))}
    cited = {c for c in cited if not c.endswith("_")}  # prefixes such as test_delta_rs_*
    missing = sorted(cited - _test_names())
    assert not missing, f"{doc} cites tests that do not exist: {missing}"


def test_the_errors_quoted_in_the_readme_troubleshooting_are_produced_by_the_code():
    """The symptom column quotes what a user sees; the fixed words of each quote must still be written
    somewhere in the code or the scripts. Values are left out: `...`, quoted names, `<placeholders>`,
    numbers and addresses, setting names (ALL_CAPS) and a leading `service:` that the scripts fill in."""
    section = text("README.md").split("## Troubleshooting", 1)[1]
    quotes = re.findall(r"^\| `([^`]+)` \|", section, re.M)
    assert len(quotes) >= 5
    sources = "\n".join(p.read_text() for pattern in ("plugins/**/*.py", "scripts/**/*.sh")
                        for p in ROOT.glob(pattern))
    external = ("Could not find valid SPARK_HOME",)  # Spark's own words
    for quote in quotes:
        if quote in external:
            continue
        fixed = re.sub(r"^[a-z]+: ", "", quote)
        pieces = re.split(r"\.\.\.|'[^']*'|<[^>]*>|\S*\d\S*|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", fixed)
        for piece in (p.strip(" ;,.") for p in pieces):
            if len(piece) > 6:
                assert piece in sources, f"README's troubleshooting quotes '{quote}', but no code writes '{piece}'"


def _anchors(doc: str) -> set[str]:
    """GitHub's anchors of a document's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text(doc), flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS)
def test_every_link_to_a_section_finds_its_heading(doc):
    links = re.findall(r"\]\(((?:docs/)?[\w/]*\.md)?#([\w-]+)\)", text(doc))
    broken = []
    for target, anchor in links:
        target_doc = doc if not target else (target if target.startswith("docs/") or target == "README.md"
                                             else f"{Path(doc).parent}/{target}".removeprefix("./"))
        if anchor not in _anchors(target_doc):
            broken.append(f"{target or doc}#{anchor}")
    assert not broken, f"{doc} links to sections that do not exist: {broken}"
