"""The user docs name only things that exist: every `tidemark` command the README shows parses, every make
target it names is in the Makefile, and every file, module and test the docs point at is in the tree. A
rename in the code that leaves a doc behind fails here, naming the doc and the stale name."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tidemark.observe.measurements import METRICS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/DESIGN.md", "docs/OPERATIONS.md", "docs/CONFIGURATION.md", "docs/OBJECT_STORAGE_NOTES.md"]
PACKAGES = ("tidemark", "tidemark_airflow", "tidemark_cli", "tidemark_spark")
NOT_CODE = {"tidemark.ledger.schemaVersion"}  # a Delta table property, spelled like a module
NOT_CODE |= {metric.name for metric in METRICS}  # metric names (tidemark.observe.measurements), spelled likewise


def text(doc: str) -> str:
    return (ROOT / doc).read_text()


def fenced_lines(doc: str) -> list[str]:
    return [line for block in re.findall(r"```[a-z]*\n(.*?)```", text(doc), re.S) for line in block.splitlines()]


def inline_spans(doc: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text(doc), flags=re.S))


COMMAND = re.compile(r"(?:^|\s|/)tidemark\s+((?:pipelines|offsets|lag|run|ledger|audit|dead-letters|maintain)\b.*)")


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


# --- the three-broker cluster's docs against scripts/kafka_cluster.sh (issue 42) ---------------------------

CLUSTER_SCRIPT = ROOT / "scripts" / "kafka_cluster.sh"
CLUSTER_LISTENERS = {"PLAINTEXT": "plaintext", "the KRaft controller": "controller", "SSL": "ssl",
                     "mutual TLS": "mtls", "SASL_SSL": "sasl_ssl",
                     "SSL with a certificate for another host name": "wrong_name"}
"""The port table's listener names (docs/OPERATIONS.md, *The local three-broker cluster*) -> the script's kinds."""
CLUSTER_WORDS = {"plaintext": r"PLAINTEXT|plaintext", "controller": r"controller",
                 "ssl": r"(?<![A-Za-z])SSL(?![A-Za-z])", "mtls": r"[Mm]utual TLS|mtls|MTLS", "sasl_ssl": r"SASL_SSL",
                 "wrong_name": r"another host name"}
"""What a paragraph that names a port of a listener says about it."""


def cluster_script(*args: str, base: int, home: Path) -> str:
    import os
    import subprocess

    env = {**os.environ, "KAFKA_CLUSTER_BASE_PORT": str(base), "KAFKA_CLUSTER_HOME": str(home)}
    return subprocess.run(["bash", str(CLUSTER_SCRIPT), *args], env=env, capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def script_cluster_offsets() -> dict[str, int]:
    """Each listener kind's port offset, from the script's own ``port()``."""
    script = re.search(r"^port\(\).*?^}", CLUSTER_SCRIPT.read_text(), re.M | re.S).group(0)
    return {kind: int(offset) for kind, offset in re.findall(r"(\w+)\) offset=(\d)", script)}


def documented_cluster_offsets() -> dict[str, int]:
    section = text("docs/OPERATIONS.md").split("### The local three-broker cluster", 1)[1].split("\n### ", 1)[0]
    return {CLUSTER_LISTENERS[name.strip()]: int(offset)
            for offset, name in re.findall(r"^\| \+(\d) \| ([^|]+) \|", section, re.M)}


def test_the_cluster_port_table_is_the_scripts_arithmetic_at_any_base_port(tmp_path):
    """Every listener of the script, the controller's too, is in the table with its offset, and the script's
    `bootstrap KIND` prints exactly those ports, at the default base port and at another one."""
    assert documented_cluster_offsets() == script_cluster_offsets()
    for base in (27092, 31000):
        for kind, offset in documented_cluster_offsets().items():
            assert cluster_script("bootstrap", kind, base=base, home=tmp_path) == ",".join(
                f"127.0.0.1:{base + 10 * n + offset}" for n in range(3))


def test_the_cluster_examples_ask_the_script_and_each_port_the_docs_show_is_the_listener_they_name(tmp_path):
    ops = text("docs/OPERATIONS.md")
    offsets = script_cluster_offsets()
    kinds = {27092 + 10 * n + offset: kind for kind, offset in offsets.items() for n in range(3)}
    for paragraph in re.split(r"\n\s*\n", ops):
        for port in {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", paragraph)} & set(kinds):
            assert re.search(CLUSTER_WORDS[kinds[port]], paragraph), \
                f"docs/OPERATIONS.md: port {port} is the {kinds[port]} listener, which its paragraph does not name:\n" \
                f"{paragraph}"
    # Commands and connections take the servers from the script, which knows the base port
    spans = re.sub(r"```.*?```", "", ops, flags=re.S).split("`")[1::2]  # inline code, also over a line break
    blocks = re.findall(r"```[a-z]*\n(.*?)```", ops, re.S) + spans
    for block in blocks:
        if re.search(r"--bootstrap-server|bootstrap\.servers", block):
            for port in {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", block)} & set(kinds):
                pytest.fail(f"docs/OPERATIONS.md: `{block.strip()}` names port {port}; use "
                            f"$(scripts/kafka_cluster.sh bootstrap {kinds[port]})")
    asked = [(block, kind) for block in blocks for kind in re.findall(r"kafka_cluster\.sh bootstrap (\w+)\)", block)]
    assert {kind for _, kind in asked} >= {"mtls", "plaintext"}, asked
    for block, kind in asked:
        assert kind in offsets and cluster_script("bootstrap", kind, base=31000, home=tmp_path)
        if "ssl.certfile" in block or "ssl.keystore" in block:
            assert kind == "mtls", f"a connection with a client certificate asks for the {kind} listener:\n{block}"
        elif "SASL_SSL" in block:
            assert kind == "sasl_ssl", block
        elif '"SSL"' in block:
            assert kind in ("ssl", "wrong_name"), block
        elif "--bootstrap-server" in block:
            assert kind == "plaintext", f"the Kafka tools of the runbooks use the plaintext listener:\n{block}"


def test_the_cluster_docs_name_where_its_state_lives_and_its_base_port():
    section = text("docs/OPERATIONS.md").split("### The local three-broker cluster", 1)[1].split("\n### ", 1)[0]
    for variable in ("KAFKA_CLUSTER_HOME", "KAFKA_CLUSTER_BASE_PORT"):
        assert variable in section and variable in CLUSTER_SCRIPT.read_text()


def yaml_blocks() -> list[tuple[str, int, str]]:
    """Every ```yaml block of the docs: (doc, its line, its text)."""
    found = []
    for doc in DOCS:
        for match in re.finditer(r"```yaml\n(.*?)```", text(doc), re.S):
            found.append((doc, text(doc)[:match.start()].count("\n") + 1, match.group(1)))
    return found


@pytest.mark.parametrize(("doc", "line", "block"), yaml_blocks(), ids=lambda v: v if isinstance(v, (str, int)) else "")
def test_every_yaml_example_is_yaml_and_every_pipeline_example_validates(doc, line, block, tmp_path, monkeypatch):
    import yaml

    from tidemark.config.pipeline import parse_pipeline

    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError as exc:
        pytest.fail(f"{doc}:{line}: the example is not valid YAML: {exc}")
    if isinstance(data, dict) and {"name", "table"} <= data.keys() and ("topics" in data or "topic_pattern" in data):
        parse_pipeline(data, f"{doc}:{line}")  # a ConfigError names the doc, the line and the problem
