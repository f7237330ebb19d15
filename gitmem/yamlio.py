"""YAML as gitmem reads and writes it: the records' front matter, the policies, the
scenarios.

Read: the safe loader (libyaml's where PyYAML has it), refusing a key given twice, a
value YAML cannot build (named at its line and key) and aliases that expand beyond
reason; every problem a FormatError naming the file and line. Written: keys in their
order, text as written (a character YAML reads as a line break is escaped).
"""

from __future__ import annotations

from typing import Any

import yaml

from gitmem.errors import FormatError, ValidationError

# libyaml's safe loader when PyYAML has it (several times faster), else the pure one.
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SafeLoader(_BASE_LOADER):  # type: ignore[misc]
    """The safe loader, refusing a key given twice in one mapping: YAML keeps the last
    silently, so a second `public:` under the channel rules, say, would replace the
    first with no word (a merge or a hand edit can make one). A value YAML cannot
    build (`0x_` as an int) is a YAML error naming its line and key, like any other."""

    def construct_document(self, node: yaml.Node) -> Any:
        self._root = node  # to name the key of a value that cannot be built
        size = _expanded_size(node, {})
        if size > EXPANDED_MAX:
            raise yaml.constructor.ConstructorError(
                None, None, f"its aliases (*name) expand to {size:,} values, more than "
                f"{EXPANDED_MAX:,}: write the values out, or use fewer aliases",
                node.start_mark)
        return super().construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # what int(), float(), a bool lookup raise on bad text
            raise _Unbuildable(node, exc, _key_path(self._root, node)) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        if not isinstance(node, yaml.MappingNode):
            return super().construct_mapping(node, deep)  # `!!set 1`: YAML's own error
        first: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)):  # a list key: YAML's own error
                if key in first:
                    raise _KeyTwice(key, first[key], key_node.start_mark)
                first[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


# Timestamps stay the text written: the records check it (`parse_ts`) as they check a
# quoted one, where YAML would refuse `2026-02-30` with a bare ValueError and read
# `2026-02-09 05:12:33Z` (a space for the T) as a date-time the records refuse.
SafeLoader.add_constructor("tag:yaml.org,2002:timestamp", SafeLoader.construct_yaml_str)


class _KeyTwice(yaml.constructor.ConstructorError):
    """A mapping gives a key twice (`yaml_problem` says where each is)."""

    def __init__(self, key: Any, first: yaml.Mark, again: yaml.Mark) -> None:
        super().__init__(None, first, f"the key {key!r} is given twice", again)


class _Unbuildable(yaml.constructor.ConstructorError):
    """A scalar YAML resolved to a type its text is not (`0x_`, `!!bool maybe`)."""

    def __init__(self, node: yaml.Node, exc: Exception, key: str | None) -> None:
        kind = str(node.tag).rsplit(":", 1)[-1]
        text = str(node.value)
        shown = repr(text if len(text) <= 60 else text[:57] + "...")
        why = f" ({exc})" if isinstance(exc, ValueError) else ""
        super().__init__(None, None, f"{shown} is not a valid YAML {kind}{why}; quote it if "
                         "it is text", node.start_mark)
        self.key = key


# The values a document may hold with its aliases expanded: a policy, record or scenario
# is small, and a "billion laughs" (nine levels of ten aliases) is 10^9 values that any
# walk, a message's repr or a JSON dump, would take hours over.
EXPANDED_MAX = 1_000_000


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes `node` stands for with every alias expanded; each node's size is
    counted once (`sizes`, by id), so this is linear in the document's own nodes."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = 1  # a node that holds itself (`&a [*a]`) counts once
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    else:
        children = []
    size = 1 + sum(_expanded_size(child, sizes) for child in children)
    sizes[id(node)] = size
    return size


def _key_path(node: yaml.Node, target: yaml.Node, path: str = "",
              seen: set[int] | None = None) -> str | None:
    """The dotted keys from `node` down to `target` (a list's items share its key). Each
    node is visited once: aliases make a graph of a tree (nine levels of `*a` repeated
    ten times are 10^9 paths to one node, which hung every command)."""
    if node is target:
        return path or None
    seen = set() if seen is None else seen
    if id(node) in seen:
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        pairs = [(f"{path}.{k.value}" if path else str(k.value), v) for k, v in node.value]
    else:
        pairs = [(path, v) for v in node.value] if isinstance(node, yaml.SequenceNode) else []
    return next((found for sub, child in pairs
                 if (found := _key_path(child, target, sub, seen)) is not None), None)


def yaml_problem(exc: yaml.MarkedYAMLError, first_line: int = 1) -> tuple[str, int]:
    """What a YAML parser error says, and the 1-based line it points at."""
    mark = exc.problem_mark
    line = mark.line + first_line if mark is not None else first_line
    problem = str(exc.problem)
    if isinstance(exc, _Unbuildable) and exc.key:
        return f"field {exc.key!r}: {problem}", line
    if isinstance(exc, _KeyTwice) and exc.context_mark is not None:
        return (f"{problem} (first on line {exc.context_mark.line + first_line}); YAML "
                "would keep only the last: remove one"), line
    if exc.context and exc.context_mark is not None:
        opened = exc.context_mark.line + first_line
        if opened != line:
            problem += f" ({exc.context} that opens on line {opened})"
    return problem, line


def yaml_error(exc: yaml.YAMLError, path: str, what: str, first_line: int = 1) -> FormatError:
    """The error for YAML that does not load: `what` is broken, where and why; a value
    YAML cannot build is a field error."""
    if isinstance(exc, _Unbuildable):
        line = exc.problem_mark.line + first_line if exc.problem_mark else first_line
        return ValidationError(str(exc.problem), path=path, line=line, field=exc.key)
    if isinstance(exc, yaml.MarkedYAMLError):
        problem, line = yaml_problem(exc, first_line)
        return FormatError(f"{what}: {problem}", path=path, line=line)
    return FormatError(f"{what}: {exc}", path=path, line=1)


def load_yaml(text: str, path: str) -> dict[str, Any]:
    """A YAML mapping document, or a FormatError naming its line."""
    try:
        data = yaml.load(text, Loader=SafeLoader)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, path, "broken YAML") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FormatError(f"expected a mapping at the top, got {type(data).__name__}",
                          path=path, line=1)
    return data


# --------------------------------------------------------------------------- writing


class _Dumper(yaml.SafeDumper):
    """YAML as gitmem writes it: a text holding a character YAML reads as a line break
    (NEL, U+2028, U+2029) is double-quoted, where it is written as an escape: in a
    single-quoted or plain scalar NEL was written as itself and read back as a space."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = '"' if any(ch in value for ch in "\x85\u2028\u2029") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_yaml(value: Any, **options: Any) -> str:
    """`value` as YAML, keys in their order, text as written (`_Dumper`)."""
    return str(yaml.dump(value, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                         **{"width": 88, **options}))
