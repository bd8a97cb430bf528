"""YAML with a bounded expansion: aliases may not turn a page of text into millions of elements.

``yaml.safe_load`` keeps aliases as shared references, so a 900-byte file of nested anchors
(``a: &a [x, x, ...]``, ``b: &b [*a, *a, ...]``, ...) expands to 10^7 elements the moment anything
walks it: validation, error messages, ``json.dumps`` into the store. Here the document is composed
first (a graph with shared nodes, as small as the text), its expanded size is counted over that
graph with memoisation (linear in the text), and only a document below :data:`MAX_EXPANDED_NODES`
is constructed. Too large is refused with the key under which the expansion happens.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_EXPANDED_NODES = 100_000  # a search spec is a page: a few hundred nodes; this is generous
_INFINITE = 10**18


class YamlTooLarge(ValueError):
    """The document expands past :data:`MAX_EXPANDED_NODES`; ``key`` is where (dotted path)."""

    def __init__(self, key: str, size: int):
        self.key = key
        self.size = size
        where = f"under {key!r} " if key else ""
        super().__init__(
            f"aliases {where}expand to more than {MAX_EXPANDED_NODES:,} elements ({size:,}); "
            "a spec is a page of YAML: write the values out, or use fewer aliases"
        )


def _children(node) -> list[tuple[str | None, Any]]:
    if isinstance(node, yaml.MappingNode):
        out = []
        for key, value in node.value:
            label = key.value if isinstance(key, yaml.ScalarNode) else None
            out += [(None, key), (label, value)]
        return out
    if isinstance(node, yaml.SequenceNode):
        return [(f"[{i}]", child) for i, child in enumerate(node.value)]
    return []


def expanded_size(root) -> tuple[int, str]:
    """(number of elements once aliases are expanded, dotted key of the largest expansion path).

    An iterative depth-first pass over the node graph: every node is expanded once and its size
    memoised, so shared (aliased) nodes cost nothing more; a recursive alias (``&a [*a]``) expands
    without end and counts as infinitely large.
    """
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            in_progress.discard(id(node))
            sizes[id(node)] = min(1 + sum(sizes[id(c)] for _, c in _children(node)), _INFINITE)
            continue
        if id(node) in sizes:
            continue
        if id(node) in in_progress:  # reached again below itself: a recursive alias
            return _INFINITE, ""
        in_progress.add(id(node))
        stack.append((node, True))
        for _, child in _children(node):
            if id(child) in in_progress:
                return _INFINITE, ""
            if id(child) not in sizes:
                stack.append((child, False))
    # Name the key: descend into the largest child while it holds most of the expansion (an
    # alias repeated many times splits it evenly: that is where to stop).
    path, node = [], root
    while True:
        children = [(label, child) for label, child in _children(node) if label is not None]
        if not children:
            break
        label, child = max(children, key=lambda item: sizes[id(item[1])])
        if sizes[id(child)] <= MAX_EXPANDED_NODES or 2 * sizes[id(child)] <= sizes[id(node)]:
            break
        path.append(label)
        node = child
    key = ".".join(path).replace(".[", "[")
    return sizes[id(root)], key


class YamlDuplicateKey(ValueError):
    """A mapping names the same key twice: YAML keeps the last silently, the user meant one of them."""

    def __init__(self, key: str, name: str, first: int, second: int):
        self.key = key
        where = f"under {key!r} " if key else ""
        super().__init__(f"duplicate key {name!r} {where}(lines {first} and {second}): keep one")


def duplicate_key(root) -> YamlDuplicateKey | None:
    """The first mapping (depth first, aliases visited once) that names a key twice, or None."""
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key, _value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    if key.value in lines:
                        return YamlDuplicateKey(path, key.value, lines[key.value], line)
                    lines[key.value] = line
        for label, child in _children(node):
            if label is not None or isinstance(node, yaml.SequenceNode):
                stack.append((child, f"{path}.{label}".lstrip(".").replace(".[", "[") if label else path))
    return None


def safe_load_bounded(text: str) -> Any:
    """``yaml.safe_load`` of ``text``, refusing a document that expands past the bound (YamlTooLarge)
    or that names a key twice in one mapping (YamlDuplicateKey: YAML would keep the last silently)."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        size, key = expanded_size(root)
        if size > MAX_EXPANDED_NODES:
            raise YamlTooLarge(key, size)
        duplicate = duplicate_key(root)
        if duplicate is not None:
            raise duplicate
        return loader.construct_document(root)
    finally:
        loader.dispose()
