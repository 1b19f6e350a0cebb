"""What the user's arguments and config files say, read without parsing them, and jsonargparse's parse errors
reworded into one line that names the key and the fix (``fit``, ``doctor`` and ``bench`` print them; exit 2).
``session`` reads its arguments through here."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional

from lightning.pytorch.utilities.rank_zero import rank_zero_debug

from lightning_speedups.commands import PACKAGE_DIR
from lightning_speedups.trainer.namespace import lightning_base, namespace_of


def import_dotted(path: str) -> Any:
    """The object a dotted name names (``package.module.Class``, ``module.Class.Inner``), as a config's
    ``class_path`` is resolved: the longest importable module, then attributes.

    Examples:
        >>> import_dotted("collections.OrderedDict").__name__
        'OrderedDict'
    """
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"no module in {path!r}")


def same_class(path: str, other: str) -> bool:
    try:
        return import_dotted(path) is import_dotted(other)
    except (ImportError, AttributeError, ValueError):  # a name that does not import is not the same class
        return False


def config_files(argv: Sequence[str]) -> list[str]:
    files = []
    for i, arg in enumerate(argv):
        if arg in ("--config", "-c") and i + 1 < len(argv):
            files.append(argv[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
    return files


def _lookup(files: Sequence[str], dotted: str) -> Optional[tuple[str, Any]]:
    """``(file, value)`` of the last config file that sets ``dotted`` (e.g. ``speedups.precision``; a class's
    ``init_args`` are looked through), or ``None``."""
    import yaml

    found = None
    for path in files:
        try:
            with open(path, encoding="utf-8") as fh:
                node: Any = yaml.safe_load(fh)
        except (OSError, yaml.YAMLError):  # the parser reports a config that does not read
            continue
        for part in dotted.split("."):
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, dict) and "init_args" in node and part in (node["init_args"] or {}):
                node = node["init_args"][part]
            else:
                break
        else:
            found = (path, node)
    return found


def _find_key(files: Sequence[str], dotted: str) -> Optional[str]:
    """The last config file that sets ``dotted``, if any."""
    found = _lookup(files, dotted)
    return found[0] if found else None


_SCALARS = {"<class 'bool'>": "true, false", "<class 'int'>": "an integer", "<class 'float'>": "a number"}


def _union_values(subtypes: str) -> Optional[str]:
    """What a union of plain values accepts (``[<class 'bool'>, typing.Literal['auto']]`` -> ``true, false, auto``);
    ``None`` when one of its members is a class or a structure (its own message says more).

    Examples:
        >>> _union_values("<class 'bool'>, typing.Literal['auto']")
        'true, false, auto'
        >>> _union_values("<class 'int'>, typing.Literal['auto']")
        'an integer, auto'
        >>> _union_values("<class 'int'>, my.Settings") is None
        True
    """
    import re

    out = []
    for part in re.findall(r"typing\.Literal\[[^\]]*\]|<class '[^']+'>|[^,\s][^,]*", subtypes):
        part = part.strip()
        if part.startswith("typing.Literal["):
            out.append(part[len("typing.Literal[") : -1].replace("'", ""))
        elif part in _SCALARS:
            out.append(_SCALARS[part])
        else:
            return None
    return ", ".join(out) or None


def explain_parse_error(message: str, argv: Sequence[str], parser: Any = None) -> str:
    """A short message for a config error: the key, the file that set it, the allowed values or close keys."""
    import difflib
    import re

    files = config_files(argv)
    match = (
        re.search(r"does not accept (?:option|nested key) '([^']+)'", message)
        or re.search(r"Parser key \"([^\"]+)\"", message)
        or re.search(r"unrecognized arguments: --([^\s=]+)", message, re.IGNORECASE)  # "Unrecognized" before 4.4x
    )
    key = match.group(1) if match else None
    unknown = "does not accept" in message or "unrecognized arguments" in message.lower()
    lines = [message.strip().splitlines()[0]]
    if key is not None and unknown:
        lines = [f"unknown key {key!r}"]
    detail = [line.strip() for line in message.strip().splitlines()[1:] if line.strip()]
    literal = next((re.search(r"Literal\[(.*)\]\. Got value: (.*)", d) for d in detail if "Literal[" in d), None)
    problem = re.search(r"Problem with given class_path '([^']+)':\s*\n\s*(.+)", message)
    union = re.search(r"Subtypes: \[(.*)\]", message)
    given_value = re.search(r"Given value: (.*)", message)
    allowed = _union_values(union.group(1)) if union and given_value and key not in ("model", "data") else None
    choices = _setting_choices(key)
    if not literal and not allowed and choices and key is not None:
        # the setting's own record says what it takes (jsonargparse 4.39 says "Cannot take a Union of no types")
        value = _cli_value(argv, key) or _file_value(files, key)
        lines = [f"bad value {value!r} for {key}; allowed: {', '.join(choices)}"]
    elif literal:
        lines = [f"bad value {literal.group(2).strip()!r} for {key}; allowed: {literal.group(1).replace(chr(39), '')}"]
    elif allowed:
        lines = [f"bad value {given_value.group(1).strip()!r} for {key}; allowed: {allowed}"]  # type: ignore[union-attr]
    elif problem:
        reason = problem.group(2).strip()
        lines = [f"{key}: class_path {problem.group(1)!r} does not work: {reason}"]
        if "No module named" in reason:
            lines.append("run from the folder that holds that module (it is put on sys.path), or pip install it")
    elif detail:
        lines.append(detail[0][:300])
    if key is not None:
        if key in ("model", "data") and "Does not validate against any of the Union subtypes" in message:
            why = _class_problem(class_path_of(argv, files, key), key)
            if why:
                lines = [why]
        if key == "trainer.callbacks" and "Does not validate against any of the Union subtypes" in message:
            why = _callbacks_problem(argv, files)
            if why:
                lines = [why]
        given = _cli_value(argv, key)
        where = _find_key(files, key) or (_find_key(files, f"{key}.class_path") if key in ("model", "data") else None)
        if given is not None:
            lines[0] += f" (given on the command line: --{key} {given})"
        elif where:
            lines[0] += f" (set in {where})"
        if unknown and parser is not None:
            known = sorted(set(_option_keys(parser)) | set(_speedups_keys()))
            parent = key.rsplit(".", 1)[0] if "." in key else ""
            siblings = [k for k in known if k.rsplit(".", 1)[0] == parent] or known
            close = difflib.get_close_matches(key, siblings, n=3, cutoff=0.6)
            if close:
                lines.append(f"did you mean: {', '.join(close)}?")
            elif siblings:
                lines.append(
                    f"keys under {parent or 'the top level'}: {', '.join(sorted(k.rsplit('.', 1)[-1] for k in siblings)[:25])}"
                )
    return "\n".join(lines)


def _callbacks_problem(argv: Sequence[str], files: Sequence[str]) -> Optional[str]:
    """Which entry of the config's ``trainer.callbacks`` jsonargparse refused, and the fix: a callback of the other
    Lightning package than the model's (the Trainer follows the model's), a class that is not a callback, or one that
    does not import. ``None`` when none of these is it."""
    found = _lookup(files, "trainer.callbacks")
    entries = found[1] if found is not None else None
    entries = [entries] if isinstance(entries, (dict, str)) else entries
    if not isinstance(entries, list):
        return None
    model_path = class_path_of(argv, files, "model")
    try:
        ns = namespace_of(import_dotted(model_path)) if model_path else None
    except (ImportError, AttributeError, ValueError):  # the model's own problem is reported on its key
        ns = None
    ns = ns or "lightning.pytorch"
    for entry in entries:
        path = entry.get("class_path") if isinstance(entry, dict) else entry if isinstance(entry, str) else None
        if not isinstance(path, str):
            continue
        try:
            cls = import_dotted(path)
        except (ImportError, AttributeError, ValueError) as err:
            return f"trainer.callbacks: class_path {path!r} does not import ({err}); fix: the module's full dotted path"
        other = namespace_of(cls)
        name = path.rsplit(".", 1)[-1]
        if other is not None and other != ns:
            return (
                f"trainer.callbacks: {path} is a `{other}` callback, but the model is a `{ns}` LightningModule and so"
                f" is the Trainer: Lightning does not mix the two packages; use: class_path: {ns}.callbacks.{name}"
            )
        if not (isinstance(cls, type) and any(k.__name__ == "Callback" for k in cls.__mro__)):
            return f"trainer.callbacks: {path} is not a Lightning callback; fix: give a subclass of {ns}.callbacks.Callback"
    return None


def _setting_choices(key: Optional[str]) -> list[str]:
    """The values a ``speedups.*`` key's record allows, when its type is a ``Literal`` (``[]`` otherwise)."""
    from typing import Literal, Union, get_args, get_origin

    from lightning_speedups.config import all_settings

    if not key or not key.startswith("speedups."):
        return []
    path = key.removeprefix("speedups.")
    for _, setting in all_settings():
        if setting.path != path:
            continue
        out: list[str] = []
        kinds = get_args(setting.type) if get_origin(setting.type) is Union else (setting.type,)
        for kind in kinds:
            if get_origin(kind) is Literal:
                out += [str(v) for v in get_args(kind)]
        return out
    return []


def _file_value(files: Sequence[str], key: str) -> Optional[str]:
    """The value a config file sets for the dotted ``key`` (the last file that sets it)."""
    found = _lookup(files, key)
    return None if found is None or found[1] is None else str(found[1])


def _speedups_keys() -> list[str]:
    """Every ``speedups.*`` key and group, from the settings' records (whichever parser saw the error)."""
    from lightning_speedups.config import all_settings

    keys = {"speedups"}
    for _, setting in all_settings():
        parts = f"speedups.{setting.path}".split(".")
        keys.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return sorted(keys)


def _option_keys(parser: Any) -> list[str]:
    """Every key the parser accepts (``trainer.max_steps``) and the groups above them (``trainer``), from its
    public defaults; ``[]`` when they cannot be read (then no suggestion is made)."""
    try:
        leaves = list(parser.get_defaults().keys())
    except Exception as err:  # a parser whose defaults do not build: nothing to suggest from
        rank_zero_debug(f"lightning_speedups: no key suggestions ({type(err).__name__}: {err})")
        return []
    keys = set(leaves)
    for key in leaves:
        parts = key.split(".")
        keys.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(keys)


def _cli_value(argv: Sequence[str], key: str) -> Optional[str]:
    """The last value the command line gives ``--key`` (``None``: not on the command line)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == f"--{key}" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(f"--{key}="):
            found = arg.split("=", 1)[1]
    return found


def class_path_of(argv: Sequence[str], files: Sequence[str], key: str) -> Optional[str]:
    """The class path the arguments or the configs give ``model`` / ``data`` (the last one wins)."""
    import yaml

    given = _cli_value(argv, key) or _cli_value(argv, f"{key}.class_path")
    if given:
        return given
    found = None
    for path in files:
        try:
            with open(path, encoding="utf-8") as fh:
                node: Any = (yaml.safe_load(fh) or {}).get(key)
        except (OSError, yaml.YAMLError, AttributeError):  # the parser reports a config that does not read
            continue
        if isinstance(node, str):
            found = node
        elif isinstance(node, dict) and isinstance(node.get("class_path"), str):
            found = node["class_path"]
    return found


def _class_problem(class_path: Optional[str], key: str) -> Optional[str]:
    """Why ``class_path`` cannot be the ``model`` / ``data`` class, with the fix (``None``: no reason found)."""
    import importlib

    if not class_path:
        return None
    base = "LightningModule" if key == "model" else "LightningDataModule"
    module_name, _, name = class_path.rpartition(".")
    if not module_name:
        return f"{key}: class_path {class_path!r} is not a dotted path; fix: write module.ClassName"
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as err:
        return (
            f"{key}: class_path {class_path!r}: {err.filename}:{err.lineno}: SyntaxError: {err.msg}; fix the file there"
        )
    except ImportError as err:
        return (
            f"{key}: class_path {class_path!r} does not import: {err}; run from the folder that holds that"
            " module (it is put on sys.path), or pip install it"
        )
    except Exception as err:
        return f"{key}: importing {module_name} raised {user_error_text(err)}"
    obj = getattr(module, name, None)
    if obj is None:
        close = [n for n in dir(module) if n.lower() == name.lower()]
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"{key}: module {module_name} has no {name!r}{hint}; fix the class_path"
    if not (inspect.isclass(obj) and getattr(lightning_base(obj), "__name__", None) == base):
        what = f"a {type(obj).__name__}" if not inspect.isclass(obj) else "a class"
        return (
            f"{key}: {class_path} is {what} that is not a {base}; fix: give a subclass of"
            f" lightning.pytorch.{base} (or lightning.{base})"
        )
    return None


def user_frame(err: BaseException) -> Optional[tuple[BaseException, str, int, str]]:
    """The innermost exception of ``err``'s chain raised in the user's own code, with its deepest user
    frame (file, line, function): not the pack, not an installed library, not the standard library."""
    import sysconfig
    import traceback

    skip = {
        os.path.realpath(p) for p in (PACKAGE_DIR, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"])
    }
    skip |= {os.path.realpath(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    # the libraries the CLI is built from, wherever they are installed (an editable install, PYTHONPATH)
    for name in ("jsonargparse", "lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities", "torch"):
        module_file = getattr(sys.modules.get(name), "__file__", None)
        if module_file:
            skip.add(os.path.realpath(os.path.dirname(module_file)))
    seen: set[int] = set()
    chain: list[BaseException] = []
    node: Optional[BaseException] = err
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        chain.append(node)
        node = node.__cause__ or node.__context__
    for exc in reversed(chain):  # innermost first
        frames = [
            f
            for f in traceback.extract_tb(exc.__traceback__)
            if not f.filename.startswith("<")
            and not any(os.path.realpath(f.filename).startswith(p + os.sep) for p in skip)
        ]
        if frames:
            last = frames[-1]
            return exc, last.filename, last.lineno or 0, last.name
    return None


def user_error_text(err: BaseException) -> str:
    found = user_frame(err)
    if found is None:
        return f"{type(err).__name__}: {err}"
    exc, filename, line, func = found
    return f"{type(exc).__name__}: {exc} (at {filename}:{line}, in {func})"
