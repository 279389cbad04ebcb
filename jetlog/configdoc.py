"""``docs/configuration.md`` generated from the configuration structs (``jetlog/config.py``): every
key with its type, default, command-line flag, environment variable and description (the
attribute docstrings of the source). A test compares the file with this output, so the reference
cannot drift from the code. Regenerate with ``python -m jetlog.configdoc > docs/configuration.md``.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

import msgspec

from jetlog import config as C

# Command-line flags of ``jetlog serve`` / ``jetlog dev`` that set a key (cli._overrides).
FLAGS = {
    "upstream.url": "--nats-url",
    "upstream.leafnode_url": "--leafnode-url",
    "data_dir": "--data-dir",
    "name": "--name",
    "http.listen": "--http",
    "logging.level": "--log-level",
    "logging.format": "--log-format",
    "cluster.name": "--cluster-name",
    "cluster.peers": "--cluster-peers",
    "cluster.default_replicas": "--default-replicas",
    "cluster.rejoin": "--rejoin",
}


def _docstrings() -> dict[tuple[str, str], str]:
    """(class name, field) → the string literal that follows the field in the source."""
    tree = ast.parse(inspect.getsource(C))
    out: dict[tuple[str, str], str] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        for i, stmt in enumerate(body):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            nxt = body[i + 1] if i + 1 < len(body) else None
            if (
                isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                out[(node.name, stmt.target.id)] = " ".join(nxt.value.value.split()).replace("``", "`")
    return out


def _type_name(t: Any) -> str:
    text = getattr(t, "__name__", None) if isinstance(t, type) else None
    if text:
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(text, text)
    s = str(t).replace("typing.", "")
    s = (
        s.replace("Literal[", "one of [")
        .replace("str | None", "string")
        .replace("list[str]", "list of strings")
    )
    return s


def _default(f: Any) -> str:
    if f.default is not msgspec.NODEFAULT:
        v = f.default
    elif f.default_factory is not msgspec.NODEFAULT:
        v = f.default_factory()
    else:
        return "(required)"
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[]"
    return str(v)


def rows() -> list[tuple[str, str, str, str, str, str]]:
    """(key, type, default, flag, environment, description) for every leaf key."""
    docs = _docstrings()
    env = {f"upstream.{k}": var for var, k in C.SECRET_ENV.items()}
    env["cluster.secret_file"] = "JETLOG_CLUSTER_SECRET (the secret itself)"
    out = []

    def walk(cls: type, prefix: str) -> None:
        for f in msgspec.structs.fields(cls):
            key = f"{prefix}{f.name}"
            if isinstance(f.type, type) and issubclass(f.type, msgspec.Struct):
                walk(f.type, key + ".")
                continue
            desc = docs.get((cls.__name__, f.name), "")
            out.append((key, _type_name(f.type), _default(f), FLAGS.get(key, ""), env.get(key, ""), desc))

    walk(C.NodeConfig, "")
    return out


def render() -> str:
    """The whole reference page."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from `jetlog/config.py` by `python -m jetlog.configdoc` (a test keeps it equal).",
        "Keys are TOML keys (`[section]` then `key`); `jetlog serve --config FILE` reads them, flags",
        "override the file, the environment variables override both for secrets. A bad value stops",
        "the node at start naming the key (exit status 2). `deploy/jetlog.toml` shows every key with",
        "its default.",
        "",
    ]
    section = None
    for key, typ, default, flag, env, desc in rows():
        sec = key.split(".")[0] if "." in key else ""
        if sec != section:
            section = sec
            lines += ["", f"## {'[' + sec + ']' if sec else 'Top level'}", ""]
            lines += ["| key | type | default | flag | environment | meaning |", "|---|---|---|---|---|---|"]
        name = key.split(".", 1)[1] if "." in key else key
        cells = [
            f"`{name}`",
            typ,
            f"`{default}`",
            f"`{flag}`" if flag else "",
            f"`{env}`" if env else "",
            desc,
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


if __name__ == "__main__":
    print(render(), end="")
