"""Find the files, parse them, run the rules, honour ``# noqa``."""

from __future__ import annotations

import ast
import gc
import io
import os
import re
import symtable
import tokenize
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Protocol, Union, cast

from lightning_speedups.lint.cache import SyntaxCache
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.graph import Project
from lightning_speedups.lint.rules import RULES, Rule
from lightning_speedups.lint.rules.base import WARNING, Hit
from lightning_speedups.lint.runs import UNDER_FLAG

#: Directory names never descended into when a directory is given.
EXCLUDED_DIRS = frozenset({"__pycache__", "node_modules", "venv", "build", "dist", "site-packages", "__pypackages__"})

_NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<codes>[A-Za-z]+\d+(?:[\s,]+[A-Za-z]+\d+)*))?", re.IGNORECASE)


@dataclass(frozen=True)
class Finding:
    """One finding: where, which rule (code and tip), what, and how to fix it.

    ``line`` and ``col`` are 1-based (``col`` like flake8/ruff). ``runs`` says how often the line
    (or the cost it sets up) runs as far as the file shows: ``per batch``, ``per sample``, ``every N
    batches``, ``per epoch``, ``unknown``. ``severity`` follows from it: ``warning`` for per-batch
    and per-sample costs, ``info`` otherwise (a cost paid once per run is not reported).
    """

    code: str
    tip: str
    path: str
    line: int
    col: int
    message: str
    fix: str
    end_line: int = field(default=0, compare=False, repr=False)
    runs: str = field(default="per batch", compare=False)
    severity: str = field(default=WARNING, compare=False)
    #: the source text that replaces lines ``line``..``end_line`` from ``col`` (a mechanical fix), or ``None``.
    replacement: Optional[str] = field(default=None, compare=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("end_line")
        return d

    def format(self) -> str:
        return (
            f"{self.path}:{self.line}:{self.col}: {self.code} [{self.tip}] {self.severity} ({self.runs}): "
            f"{self.message} (fix: {self.fix})"
        )


@dataclass
class LintResult:
    """What :func:`lint_paths` found: findings, how many files were read, and errors (one line each)."""

    findings: list[Finding]
    files: int
    errors: list[str]

    @property
    def exit_code(self) -> int:
        """2 when any path could not be read or parsed, else 1 with a warning, else 0 (``info``
        findings alone do not fail a hook)."""
        if self.errors:
            return 2
        return 1 if any(f.severity == WARNING for f in self.findings) else 0


#: The default rule set (ruff's convention: a conservative default, the rest opt-in with ``--select`` /
#: ``--extend-select`` / ``--all``): host reads and syncs in the training step, whose cost is certain
#: when the line runs every step and whose fix is safe as written. Through the ``DEFAULT`` selector
#: they report only what the analysis is sure runs every step (``warning``: per batch / per sample);
#: named explicitly, their ``info`` findings (per epoch, every N batches, unknown) are reported too.
#: Off by default: loader habits (LS102-LS104: a real cost only when batches are large beside the
#: step), creation habits (LS101, LS105, LS203: often one-off setup), DataParallel (LS301: a fallback
#: some projects need), gradient zeroing (LS302, LS303: the fix has caveats) and settings (LS304-LS306).
DEFAULT_RULES = ("LS201", "LS202", "LS204", "LS205", "LS206", "LS207", "LS208")


def _matches(rule: Rule, selector: str) -> bool:
    s = selector.strip().upper()
    if s == "DEFAULT":
        return rule.code in DEFAULT_RULES
    return s == "ALL" or rule.code.startswith(s) or rule.tip == s


def select_rules(select: Optional[Iterable[str]] = None, ignore: Optional[Iterable[str]] = None) -> list[Rule]:
    """The rules chosen by ``select`` / ``ignore`` (code prefixes like ``"LS2"``, codes, tip ids, ``"ALL"``,
    ``"DEFAULT"``); no ``select`` is every rule (the library's own default; the command line's is ``DEFAULT``).

    Raises:
        ValueError: a selector matches no rule (a typo would otherwise silently select nothing).
    """
    select = [s for s in (select or ()) if s.strip()]
    ignore = [s for s in (ignore or ()) if s.strip()]
    for s in [*select, *ignore]:
        if not any(_matches(r, s) for r in RULES):
            raise ValueError(
                f"unknown rule selector {s.strip()!r}: use a code or prefix (LS, LS2, LS201), a tip id (T08),"
                " DEFAULT or ALL"
            )
    chosen = [r for r in RULES if not select or any(_matches(r, s) for s in select)]
    return [r for r in chosen if not any(_matches(r, s) for s in ignore)]


def sure_only_codes(select: Optional[Iterable[str]]) -> frozenset[str]:
    """Codes chosen only through ``DEFAULT``: their findings are kept only where the line surely runs
    every step (``warning``)."""
    select = [s for s in (select or ()) if s.strip()]
    if not any(s.strip().upper() == "DEFAULT" for s in select):
        return frozenset()
    others = [s for s in select if s.strip().upper() != "DEFAULT"]
    return frozenset(r.code for r in RULES if r.code in DEFAULT_RULES and not any(_matches(r, s) for s in others))


#: A step of evaluation, not of training: per batch of a loop that does not dominate the run.
_EVALUATION = re.compile(r"\b(validation_step|test_step|predict_step|on_(validation|test|predict)_batch_\w+)\b")


def is_sure(finding: Finding) -> bool:
    """The line surely runs every training step: a ``warning`` outside evaluation steps, not under a switch of
    the user's configuration whose default the code does not show (``if self.args.nan_detection:``)."""
    return (
        finding.severity == WARNING
        and not _EVALUATION.search(finding.message)
        and f"{UNDER_FLAG}`if " not in finding.message
    )


def _sure(findings: list[Finding], select: Optional[Iterable[str]]) -> list[Finding]:
    unsure = sure_only_codes(select)
    return [f for f in findings if f.code not in unsure or is_sure(f)] if unsure else findings


def _noqa_lines(source: str) -> dict[int, Optional[tuple[str, ...]]]:
    """``{line: codes}`` of the ``# noqa`` comments (``None`` = bare ``# noqa``: every code)."""
    if "noqa" not in source.lower():
        return {}
    out: dict[int, Optional[tuple[str, ...]]] = {}

    def add(line: int, comment: str) -> None:
        m = _NOQA.search(comment)
        if m:
            codes = m.group("codes")
            out[line] = None if codes is None else tuple(c.upper() for c in re.split(r"[\s,]+", codes) if c)

    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                add(tok.start[0], tok.string)
    except (tokenize.TokenError, SyntaxError):  # pragma: no cover - the file parsed, so this is rare
        for i, text in enumerate(source.splitlines(), 1):
            if "#" in text:
                add(i, text[text.index("#") :])
    return out


def _suppressed(finding: Finding, noqa: dict[int, Optional[tuple[str, ...]]]) -> bool:
    for line in {finding.line, finding.end_line}:
        if line in noqa:
            codes = noqa[line]
            if codes is None or any(finding.code.startswith(c) for c in codes):
                return True
    return False


class _Located(Protocol):
    """A node with a position (``ast.AST`` itself declares none; ``ast.stmt`` and ``ast.expr`` do)."""

    lineno: int
    col_offset: int


def lint_tree(
    tree: ast.Module,
    source: str,
    path: Union[str, os.PathLike] = "<string>",
    rules: Optional[Sequence[Rule]] = None,
    *,
    noqa: bool = True,
    include_tests: bool = False,
    project: Optional[Project[FileContext]] = None,
) -> list[Finding]:
    """Run ``rules`` (default: all) on a parsed file.

    Test files (``test_*.py``, ``*_test.py``, ``conftest.py``, under ``tests/``) are not training
    runs: they get no findings, unless ``include_tests`` (the doctor lints the files that define the
    user's model and data, wherever they live). ``project`` holds the other files of the run: how
    often a function runs is then decided over all of them (see ``graph.py``).
    """
    if project is not None and str(path) in project:
        ctx = project.context(str(path))
    else:
        project = project or Project({str(path): (tree, source)}, FileContext)
        ctx = FileContext(tree, path, source, project)
        project.adopt(ctx, str(path))
    if ctx.purpose.is_test_file and not include_tests:
        return []
    display = str(path)
    found: set[Finding] = set()
    for rule in RULES if rules is None else rules:
        for hit in rule.check(ctx):
            h = hit if isinstance(hit, Hit) else Hit(*hit)  # a plain (node, message[, fix]): Hit's defaults
            node = cast(_Located, h.node)  # rules report statements and expressions, which have positions
            found.add(
                Finding(
                    code=rule.code,
                    tip=rule.tip,
                    path=display,
                    line=node.lineno,
                    col=node.col_offset + 1,
                    message=h.message,
                    fix=h.fix or rule.fix,
                    end_line=getattr(node, "end_lineno", None) or node.lineno,
                    runs=h.runs,
                    severity=h.severity,
                    replacement=h.replacement,
                )
            )
    findings = sorted(found, key=lambda f: (f.line, f.col, f.code))
    if noqa and findings:  # the comments are read (a tokenize pass) only where there is something to suppress
        table = _noqa_lines(source)
        findings = [f for f in findings if not _suppressed(f, table)]
    return findings


def triggered_rules(source: str, rules: Sequence[Rule]) -> list[Rule]:
    """The ``rules`` whose trigger patterns all occur in ``source`` (the others cannot fire)."""
    return [r for r in rules if r.triggered(source)]


def lint_source(
    source: Union[str, bytes],
    path: Union[str, os.PathLike] = "<string>",
    *,
    select: Optional[Iterable[str]] = None,
    ignore: Optional[Iterable[str]] = None,
    noqa: bool = True,
) -> list[Finding]:
    """Lint one source text.

    Examples:
        >>> [f.code for f in lint_source("import torch\\nm = torch.nn.DataParallel(net)\\n")]
        ['LS301']

    Raises:
        SyntaxError: the source does not parse.
    """
    if isinstance(source, bytes):
        tree = ast.parse(source, filename=str(path))
        text = source.decode(tokenize.detect_encoding(io.BytesIO(source).readline)[0], errors="replace")
    else:
        tree = ast.parse(source, filename=str(path))
        text = source
    return _sure(lint_tree(tree, text, path, select_rules(select, ignore), noqa=noqa), select)


def lint_sources(
    sources: dict[str, str],
    *,
    select: Optional[Iterable[str]] = None,
    ignore: Optional[Iterable[str]] = None,
    noqa: bool = True,
) -> list[Finding]:
    """Lint several source texts as one project (``{path: source}``): calls between them count.

    Examples:
        >>> train = "import torch\\nfrom meter import Meter\\ndef fit(loader, net, opt):\\n    m = Meter()\\n    for x in loader:\\n        loss = net(x.cuda()).sum()\\n        loss.backward()\\n        opt.step()\\n        m.update(loss)\\n"
        >>> meter = "class Meter:\\n    def update(self, v):\\n        self.total += v.item()\\n"
        >>> [(f.path, f.line, f.code) for f in lint_sources({"train.py": train, "meter.py": meter})]
        [('meter.py', 3, 'LS206')]

    Raises:
        SyntaxError: a source does not parse.
    """
    rules = select_rules(select, ignore)
    files: dict[str, tuple[Optional[ast.Module], str]] = {
        path: (ast.parse(text, filename=path), text) for path, text in sources.items()
    }
    project = Project(files, FileContext)
    out: list[Finding] = []
    for path, (tree, text) in files.items():
        assert tree is not None
        out.extend(lint_tree(tree, text, path, triggered_rules(text, rules), noqa=noqa, project=project))
    project.close()
    return _sure(out, select)


def iter_python_files(paths: Iterable[Union[str, os.PathLike]]) -> tuple[list[Path], list[str]]:
    """Expand ``paths``: files as given (any suffix), directories recursively to ``*.py`` files.

    Hidden directories, ``__pycache__``, virtual environments (``venv``, ``site-packages``), ``build``,
    ``dist`` and ``*.egg-info`` are skipped. Returns ``(files, errors)``.
    """
    files: list[Path] = []
    errors: list[str] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        if p not in seen:
            seen.add(p)
            files.append(p)

    for raw in paths:
        p = Path(raw)
        if p.is_file():
            add(p)
        elif p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(
                    d for d in dirs if not d.startswith(".") and d not in EXCLUDED_DIRS and not d.endswith(".egg-info")
                )
                for name in sorted(names):
                    if name.endswith(".py"):
                        add(Path(root, name))
        else:
            errors.append(f"{raw}: no such file or directory")
    return files, errors


def lint_paths(
    paths: Iterable[Union[str, os.PathLike]],
    *,
    select: Optional[Iterable[str]] = None,
    ignore: Optional[Iterable[str]] = None,
    include_tests: bool = False,
    cache: bool = False,
) -> LintResult:
    """Lint files and directories (recursively over ``*.py``); test files only with ``include_tests``.

    With ``cache`` (the command line's default), files whose exact contents compiled in an earlier run
    are not syntax-checked again (see ``cache.py``: digests under the user's cache directory).

    A path that does not exist or a file that cannot be read or parsed is reported as one error line
    and the other files are still linted; :attr:`LintResult.exit_code` is then 2. So is a file on which
    the linter itself fails (an internal error, named as such).

    Examples:
        >>> result = lint_paths(["src/"], select=["LS2"])  # doctest: +SKIP
        >>> for f in result.findings:  # doctest: +SKIP
        ...     print(f.format())

    Raises:
        ValueError: ``select`` / ``ignore`` name no rule.
    """
    rules = select_rules(select, ignore)
    files, errors = iter_python_files(paths)
    syntax = SyntaxCache.default(cache)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # ast trees hold no cycles: collecting while a large file parses only costs time
    try:
        parsed, triggered = _read_files(files, rules, syntax, errors)
        project = Project(parsed, FileContext)
        parsed_count = len(parsed)
        findings = _lint_triggered(project, triggered, include_tests, errors)
        project.close()
        parsed.clear()
    finally:
        if gc_was_enabled:
            gc.enable()
        syntax.save()
    return LintResult(findings=_sure(findings, select), files=parsed_count, errors=errors)


def _read_files(
    files: list[Path], rules: Sequence[Rule], syntax: SyntaxCache, errors: list[str]
) -> tuple[dict[str, tuple[Optional[ast.Module], str]], dict[str, list[Rule]]]:
    """``(parsed, triggered)``: every file that reads and parses, ``{path: (tree, text)}`` (``tree`` ``None``:
    only syntax-checked, no rule but a gated one can fire there), and the rules each file triggers. A file that
    cannot be read or parsed is one line in ``errors``."""
    parsed: dict[str, tuple[Optional[ast.Module], str]] = {}
    triggered: dict[str, list[Rule]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarning / DeprecationWarning of the user's code: not ours
        for path in files:  # every file is parsed: a syntax error is reported whatever the file holds
            try:
                data = path.read_bytes()
                text = data.decode(tokenize.detect_encoding(io.BytesIO(data).readline)[0])
                if "\x00" in text:
                    raise ValueError("source code string cannot contain null bytes")
                chosen = triggered_rules(text, rules)
                tree: Optional[ast.Module] = None
                if any(r.gate is None for r in chosen):
                    tree = ast.parse(data, filename=str(path))
                    syntax.add(data)
                elif not syntax.known(data):
                    # no rule can fire here, or only gated ones (LS206: a file a training step
                    # reaches, which most are not): check the syntax without building Python ast
                    # objects or bytecode. The symbol table parses the whole file and checks its
                    # scopes (a misplaced nonlocal / global, a repeated argument), at 60% of a
                    # compile's cost and half of ast.parse's; parsed later if it must be
                    symtable.symtable(text, str(path), "exec")
                    syntax.add(data)
            except SyntaxError as exc:
                where = f"{path}:{exc.lineno}:{exc.offset or 0}" if exc.lineno else str(path)
                errors.append(f"{where}: cannot parse: {exc.msg}")
                continue
            except (OSError, ValueError, UnicodeError) as exc:
                errors.append(f"{path}: cannot read: {exc}")
                continue
            parsed[str(path)] = (tree, text)
            if chosen:
                triggered[str(path)] = chosen
    return parsed, triggered


def _lint_triggered(
    project: Project[FileContext], triggered: dict[str, list[Rule]], include_tests: bool, errors: list[str]
) -> list[Finding]:
    """The findings of the rules each file triggered (a gated rule only where its gate opens); a file on which
    the linter itself fails is one line in ``errors`` (an internal error, named as such)."""
    findings: list[Finding] = []
    for display, chosen in triggered.items():
        chosen = [r for r in chosen if r.gate is None or r.gate(project, display)]
        if chosen:  # a file no rule needs gets a context only if a caller's frequency needs it
            try:
                ctx = project.context(display)  # parses a file that only a gated rule triggered on
                findings.extend(
                    lint_tree(ctx.tree, ctx.source, display, chosen, include_tests=include_tests, project=project)
                )
            except Exception as exc:  # a bug of ours on one file must not hide the others' findings
                errors.append(f"{display}: internal error of the linter: {type(exc).__name__}: {exc}")
    return findings
