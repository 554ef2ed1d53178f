#!/usr/bin/env python3
"""Write the documented copies of seatwright's shared values from their one definition.

The values are assigned once, in plugins/module_utils/defaults.py (folders, paths, the seat-name
pattern, node defaults) and plugins/module_utils/bench/workload.py (the benchmark's defaults). Three
kinds of text must spell them literally, because their readers do not run our code:
  - a module's DOCUMENTATION `default:` lines (Ansible reads DOCUMENTATION without importing the
    module): rendered from the module's own argument_spec, which takes the constants;
  - a role's meta/argument_specs.yml `default:` lines: rendered from the role's defaults/main.yml
    with the common role's defaults and the collection's lookup evaluated;
  - schemas/seat.schema.json's seat-name pattern;
  - a documentation fragment's (plugins/doc_fragments/) `default:` lines, from the argument_spec of
    every module that extends it (they must agree).
The router kinds' names (router/kinds/) are written the same way as the `choices:` of every option
that names a kind (KIND_OPTIONS). Only those lines change. The README's role tables are then
rendered from the argument specs by tools/render_role_vars.py.
  tools/render_defaults.py           rewrite what is stale
  tools/render_defaults.py --check   exit 1 naming each stale line (for CI)
"""

import argparse
import importlib
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "ansible_collections.seatwright.fleet.plugins"
# The options whose choices are the router kinds: {(folder, file stem): option}.
KIND_OPTIONS = {
    ("modules", "router_rollout"): "kind",
    ("doc_fragments", "router"): "kind",
    ("roles", "router"): "router_kind",
}


def _router_kinds():
    from ansible_collections.seatwright.fleet.plugins.module_utils.router.kinds import names

    return list(names())


def _shared():
    """The lookup plugin's values: what roles see through lookup('seatwright.fleet.defaults', ...)."""
    from ansible_collections.seatwright.fleet.plugins.lookup.defaults import shared_values
    from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import rebased

    return shared_values(), rebased


def _shown(path):
    """A path as a message names it: relative to the project when it is inside it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _yaml_scalar(value):
    """How a default is written on a `default:` line: YAML flow style, as a person would type it."""
    return yaml.safe_dump(value, default_flow_style=True, width=1000).replace("\n...", "").strip()


# ---------------------------------------------------------------- modules


class _Captured(Exception):
    """Raised by the stand-in AnsibleModule once it holds the module's argument_spec."""


def argument_spec(module_name):
    """The argument_spec a module's main() builds, captured before anything runs; None with the
    reason when it cannot be read (the module does not import, or main() does something first)."""
    try:
        module = importlib.import_module("%s.modules.%s" % (PACKAGE, module_name))
    except Exception as exc:  # a broken module is reported by name, not as a traceback
        return None, "does not import (%s: %s)" % (type(exc).__name__, exc)
    captured = {}

    def recorder(*args, **kwargs):
        captured.update(kwargs.get("argument_spec") or (args[0] if args else {}))
        raise _Captured()

    original = getattr(module, "AnsibleModule", None)
    if original is None or not hasattr(module, "main"):
        return None, "has no main() building an AnsibleModule"
    module.AnsibleModule = recorder
    try:
        module.main()
    except _Captured:
        return captured, None
    except (Exception, SystemExit) as exc:
        return None, "main() stopped before building its AnsibleModule (%s: %s)" % (type(exc).__name__, exc)
    finally:
        module.AnsibleModule = original
    return None, "main() returned without building an AnsibleModule"


def _doc_bounds(text):
    """(start, end) of the DOCUMENTATION string's body in a module's source."""
    # A module's is at the left margin, a fragment's indented in its class.
    match = re.search(r'^ *DOCUMENTATION = r?"""\n', text, re.M)
    if not match:
        return None
    end = text.index('"""', match.end())
    return match.end(), end


def _option_default_line(lines, option, indent, start=0, field="default"):
    """Index of the one-line `default: VALUE` (or another `field`) of `option` (a key at `indent`
    spaces) in `lines`, from line `start` on; None when the option has none (a block-style value is
    not rewritten)."""
    head = re.compile(r"^ {%d}%s:\s*$" % (indent, re.escape(option)))
    key = re.compile(r"^ {%d}%s: *\S" % (indent + 2, field))
    for number in range(start, len(lines)):
        if not head.match(lines[number]):
            continue
        for inner in range(number + 1, len(lines)):
            text = lines[inner]
            if text.strip() and len(text) - len(text.lstrip(" ")) <= indent:
                return None  # the next key at this level: the option documents no default
            if key.match(text):
                return inner
    return None


def render_module(path):
    """(new text, problems) for one module: DOCUMENTATION defaults set to the argument_spec's."""
    text = path.read_text(encoding="utf-8")
    bounds = _doc_bounds(text)
    if bounds is None:
        return text, ["%s: no DOCUMENTATION string" % _shown(path)]
    body = text[bounds[0] : bounds[1]]
    documented = (yaml.safe_load(body) or {}).get("options") or {}
    lines = body.split("\n")
    problems = []
    spec, why = argument_spec(path.stem)
    if spec is None:
        return text, ["%s: its argument_spec cannot be read: %s" % (_shown(path), why)]
    for name, rule in sorted(spec.items()):
        if rule.get("default") is None or name not in documented:
            continue  # options missing from DOCUMENTATION are tests/unit/plugins/modules/test_module_docs.py's concern
        if documented[name].get("default") == rule["default"]:
            continue
        number = _option_default_line(lines, name, 2)
        if number is None:
            problems.append(
                "%s: option %s has default %r in argument_spec; document it on one line (default: VALUE)"
                % (_shown(path), name, rule["default"])
            )
            continue
        lines[number] = "%sdefault: %s" % (" " * 4, _yaml_scalar(rule["default"]))
    problems += _kind_choices(lines, documented, ("modules", path.stem), 2, path)
    return text[: bounds[0]] + "\n".join(lines) + text[bounds[1] :], problems


def _kind_choices(lines, documented, where, indent, path, start=0):
    """Set the `choices:` line of the option that names a router kind (KIND_OPTIONS) to the kinds."""
    option = KIND_OPTIONS.get(where)
    if option is None or option not in documented or documented[option].get("choices") == _router_kinds():
        return []
    number = _option_default_line(lines, option, indent, start, "choices")
    if number is None:
        return [
            "%s: %s names a router kind; document its choices on one line (choices: [...])" % (_shown(path), option)
        ]
    lines[number] = "%schoices: %s" % (" " * (indent + 2), _yaml_scalar(_router_kinds()))
    return []


# ---------------------------------------------------------------- documentation fragments


def _extended(doc):
    """The fragments a module's DOCUMENTATION extends, by name (seatwright.fleet.<name>[.<part>])."""
    names = doc.get("extends_documentation_fragment") or []
    return [names] if isinstance(names, str) else list(names)


def render_fragment(path, specs):
    """(new text, problems) for one fragment: its options' defaults set to the argument_spec's of the
    modules that extend it ({module: (DOCUMENTATION, argument_spec)})."""
    text = path.read_text(encoding="utf-8")
    bounds = _doc_bounds(text)
    if bounds is None:
        return text, ["%s: no DOCUMENTATION string" % _shown(path)]
    body = text[bounds[0] : bounds[1]]
    documented = (yaml.safe_load(body) or {}).get("options") or {}
    lines = body.split("\n")
    problems = []
    users = {
        module: spec
        for module, (doc, spec) in sorted(specs.items())
        if "seatwright.fleet.%s" % path.stem in _extended(doc)
    }
    for name in sorted(documented):
        wanted = {repr(spec[name].get("default")): spec[name].get("default") for spec in users.values() if name in spec}
        if len(wanted) > 1:
            problems.append(
                "%s: option %s has different defaults in the modules that extend it (%s): give them one"
                % (_shown(path), name, ", ".join(sorted(wanted)))
            )
            continue
        value = next(iter(wanted.values()), None)
        if value is None or documented[name].get("default") == value:
            continue
        number = _option_default_line(lines, name, 2)
        if number is None:
            problems.append("%s: option %s needs its default on one line (default: VALUE)" % (_shown(path), name))
            continue
        lines[number] = "%sdefault: %s" % (" " * 4, _yaml_scalar(value))
    problems += _kind_choices(lines, documented, ("doc_fragments", path.stem), 2, path)
    return text[: bounds[0]] + "\n".join(lines) + text[bounds[1] :], problems


# ---------------------------------------------------------------- roles


def _environment(shared, rebased):
    from jinja2 import Environment, StrictUndefined

    def lookup(plugin, *terms, **options):
        if plugin != "seatwright.fleet.defaults":
            raise LookupError(plugin)
        values = [rebased(shared[term], **options) for term in terms]
        return values[0] if len(values) == 1 else values

    env = Environment(undefined=StrictUndefined)
    env.globals["lookup"] = lookup
    return env


def _evaluate(env, template, context):
    """A default's value as Ansible 2.19 gives it: one whole expression keeps its type (the lookup's
    "580" stays a string), anything else is text."""
    whole = re.fullmatch(r"\{\{(.*)\}\}", template.strip(), re.S)
    if whole and "{{" not in whole.group(1):
        return env.compile_expression(whole.group(1))(**context)
    return env.from_string(template).render(**context)


def role_defaults(role, env, common):
    """A role's defaults with templates evaluated where they depend only on shared values.

    A default that needs anything else (role_path, facts) stays as written: it has no value to
    document until a play runs.
    """
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    raw = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.exists() else {}
    context = dict(common)
    resolved = {}
    for name, value in raw.items():
        if isinstance(value, str) and "{{" in value:
            try:
                value = _evaluate(env, value, context)
            except Exception:  # an undefined name or a filter only Ansible has: keep the template text
                pass
        resolved[name] = value
        context[name] = value
    return resolved


def common_defaults(env):
    return role_defaults("common", env, {})


def render_role(spec_path, env, common):
    """(new text, problems) for one role's meta/argument_specs.yml."""
    role = spec_path.parent.parent.name
    text = spec_path.read_text(encoding="utf-8")
    specs = (yaml.safe_load(text) or {}).get("argument_specs") or {}
    defaults = role_defaults(role, env, common)
    lines = text.split("\n")
    problems = []
    for entry_name, entry in specs.items():
        # Options repeat across entry points (main, down): look only inside this entry's block.
        start = next((n for n, line in enumerate(lines) if line.rstrip() == "  %s:" % entry_name), 0)
        for name, option in sorted(((entry or {}).get("options") or {}).items()):
            if name not in defaults or "default" not in option:
                continue
            wanted = defaults[name]
            if option["default"] == wanted:
                continue
            number = _option_default_line(lines, name, 6, start)
            if number is None:
                problems.append(
                    "%s: %s needs its default on one line (default: VALUE) to be written" % (_shown(spec_path), name)
                )
                continue
            lines[number] = "%sdefault: %s" % (" " * 8, _yaml_scalar(wanted))
        options = (entry or {}).get("options") or {}
        problems += _kind_choices(lines, options, ("roles", role), 6, spec_path, start)
    return "\n".join(lines), problems


# ---------------------------------------------------------------- the seat schema


def render_schema(path, pattern):
    """(new text, problems): the recipe schema's seat-name pattern set to SEAT_NAME_PATTERN."""
    text = path.read_text(encoding="utf-8")
    current = json.loads(text)["properties"]["name"].get("pattern")
    if current == pattern:
        return text, []
    # The top-level property sits at four spaces, inside "properties" (nested "name"s sit deeper).
    line = re.compile(r'^(    "name": \{.*?"pattern": )("(?:[^"\\]|\\.)*")', re.M)
    if not line.search(text):
        return text, ["%s: properties.name has no pattern on its line to rewrite" % _shown(path)]
    return line.sub(lambda m: m.group(1) + json.dumps(pattern), text, count=1), []


# ---------------------------------------------------------------- main


def rendered():
    """{path: (current text, wanted text)} for every file this tool writes, and the problems found."""
    from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import SEAT_NAME_PATTERN

    shared, rebased = _shared()
    env = _environment(shared, rebased)
    common = common_defaults(env)
    out, problems = {}, []
    specs = {}
    for path in sorted((ROOT / "plugins" / "modules").glob("*.py")):
        wanted, found = render_module(path)
        out[path] = wanted
        problems += found
        bounds = _doc_bounds(wanted)
        if bounds:
            specs[path.stem] = (yaml.safe_load(wanted[bounds[0] : bounds[1]]) or {}, argument_spec(path.stem)[0] or {})
    for path in sorted((ROOT / "plugins" / "doc_fragments").glob("*.py")):
        out[path], found = render_fragment(path, specs)
        problems += found
    for path in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        wanted, found = render_role(path, env, common)
        out[path] = wanted
        problems += found
    schema = ROOT / "schemas" / "seat.schema.json"
    out[schema], found = render_schema(schema, SEAT_NAME_PATTERN)
    problems += found
    return out, problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a documented default is stale")
    args = parser.parse_args(argv)
    out, problems = rendered()
    stale = [path for path, wanted in out.items() if path.read_text(encoding="utf-8") != wanted]
    for problem in problems:
        sys.stderr.write("render_defaults: %s\n" % problem)
    if args.check:
        for path in stale:
            sys.stderr.write(
                "render_defaults: %s documents a default that differs from its definition; "
                "run tools/render_defaults.py\n" % _shown(path)
            )
        return 1 if stale or problems else 0
    for path in stale:
        path.write_text(out[path], encoding="utf-8")
        print("render_defaults: wrote %s" % _shown(path))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
