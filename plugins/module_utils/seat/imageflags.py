"""A seat's launch flags against the image it will run: the plan's check and bring-up's.

Pure. Every flag is read the way its engine reads it (seat/engines.py canonical_flag: aliases,
'_' for '-', --no-<flag>, dotted keys, unambiguous prefixes), with the spellings the image's own
--help lists (images/facts.py help_aliases). A flag the image's engine does not list is refused by
name before any GPU is touched (stale flags cost the field 8x throughput), and so is an extra
argument that sets, in any spelling, a flag the plan renders from the recipe.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.ranks import runs_engine
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.engines import (
    ENGINES,
    canonical_flag,
    engine_args,
    extra_arg_problems,
)


def _unchecked(image):
    """Why these facts cannot check a launch's flags, or None when they can."""
    if not image.get("flags"):
        return "the facts of image %s list no engine flags (its --help printed none)" % image.get("reference")
    if "aliases" not in image:
        return (
            "the cached facts of image %s were read before seatwright kept the aliases of its --help "
            "(-tp, --x_y, --no-x)" % image.get("reference")
        )
    return None


def flags_unchecked(recipe, image):
    """Why the plan could not check the launch's flags against the image, or None when it did.

    The plan is not ready without it; bring-up reads the facts of the image it is about to run and
    checks every rank's flags again before it starts one (engine_image_facts with check_rank).
    """
    if recipe["engine"]["name"] not in ENGINES:
        return None
    declared = recipe["engine"]["image"]
    named = declared.get("build") or declared.get("reference") or (declared.get("digest") or "")[:19]
    wanted = "image %s" % named if named else "the seat's image (none is named)"
    reason = "no facts of %s are cached" % wanted if not image else _unchecked(image)
    if reason is None:
        return None
    return "image flags not checked: %s; read them (playbooks/images.yml reads a built image) and plan again" % reason


def rank_flag_problems(recipe, rank, image):
    """[(spelling, detail)] of the flags one engine rank passes that the image's engine does not list."""
    name = recipe["engine"]["name"]
    known = set(image["flags"])
    problems, seen = [], set()
    for word in engine_args(name, rank["argv"]):
        read = canonical_flag(name, word, image)
        if read is None or read["flag"] in known or read["flag"] in seen:
            continue
        seen.add(read["flag"])
        shown = (
            read["spelled"] if read["spelled"] == read["flag"] else "%s (read as %s)" % (read["spelled"], read["flag"])
        )
        problems.append((read["flag"], shown))
    return problems


def flag_refusals(recipe, ranks, image):
    """Refusals (rule-shaped: id, reason, detail, remedy) for launch flags the image does not know,
    and for extra arguments that set, in a spelling only the image's --help shows, a flag the plan
    renders from the recipe. Every spelling is read by seat/engines.py canonical_flag."""
    if not image or not image.get("flags"):
        return []
    refusals = []
    engine = image.get("engine") or {}
    if engine.get("name") and engine["name"] != recipe["engine"]["name"]:
        return [
            {
                "id": "image-engine",
                "detail": "the seat runs %s but image %s holds %s"
                % (recipe["engine"]["name"], image.get("reference"), engine["name"]),
                "remedy": "build or name an image of the seat's engine",
                "reason": "The plan checks the seat against the image it will run.",
            }
        ]
    if recipe["engine"]["name"] not in ENGINES:
        return []
    for rank in filter(runs_engine, ranks):
        for flag, shown in rank_flag_problems(recipe, rank, image):
            refusals.append(
                {
                    "id": "image-flags",
                    "detail": "node rank %d on %s passes %s, which %s %s in image %s does not list in its --help"
                    % (
                        rank["rank"],
                        rank["host"],
                        shown,
                        engine.get("name"),
                        engine.get("version"),
                        image.get("reference"),
                    ),
                    "remedy": "drop the recipe field or extra argument that passes %s, or run an image whose "
                    "engine has it" % flag,
                    "reason": "A flag the engine does not know either stops the server at start or, renamed "
                    "upstream, silently leaves the default in place; the field lost 8x throughput to "
                    "stale flags.",
                }
            )
    serving = recipe.get("serving") or {}
    settings = {"engine": recipe["engine"], "serving": {"extra_args": serving.get("extra_args") or []}}
    for problem in extra_arg_problems(settings, "the recipe", image):
        refusals.append(
            {
                "id": "extra-args",
                "detail": problem,
                "remedy": "remove the extra argument and set the recipe field it names",
                "reason": "The plan decides every flag it renders (and checks it against the rules and the "
                "fit); an extra argument spelled differently would override it unseen.",
            }
        )
    return refusals


def launch_problems(engine_name, rank, extra_args, image):
    """Why bring-up must not start one rank on this image, as sentences; [] when its flags check out.

    Bring-up's own check (engine_image_facts with check_rank), made with the facts of the image it is
    about to run, read on the node just before the start: the same refusals the plan makes.
    """
    recipe = {"engine": {"name": engine_name}, "serving": {"extra_args": list(extra_args or [])}}
    unchecked = _unchecked(image)
    if unchecked:
        return ["its launch flags cannot be checked: %s" % unchecked]
    return ["%s; %s" % (item["detail"], item["remedy"]) for item in flag_refusals(recipe, [rank], image)]


def unlisted_flags(engine_name, image, extra_args=()):
    """{flag: what renders it} of every flag seatwright can pass to `engine_name` (its table's rows,
    aliases and companions) or an extra argument passes, that the image's --help does not list.
    A flag renamed upstream counts as listed when the image lists any of its names.

    An image ready for every shipped recipe of its engine returns {}; make images records it.
    """
    known = set(image.get("flags") or ())

    def listed(word):
        read = canonical_flag(engine_name, word, image)
        return read is None or read["flag"] in known

    missing = {}
    for row in ENGINES[engine_name]["rows"]:
        source = row["field"] or "the launch (node rank, addresses)"
        names = (row["flag"],) + tuple(row.get("renamed", ()))
        if not any(listed(name) for name in names):
            missing[row["flag"]] = source
        for word in tuple(row.get("aliases", ())) + tuple(row["also"]):
            if not listed(word):
                missing[word] = source
    for word in extra_args or ():
        if str(word).startswith("--") and not listed(word):
            missing[word] = "serving.extra_args"
    return dict(sorted(missing.items()))
