"""Pure decisions for driving a router in front of the seats (LiteLLM proxy, SGLang's model gateway).

The interface every implementation offers (io/router/client.py): register a seat, set an alias's
targets and weights, read who answered, drain, deregister. What is decided here: the canary step's
weights, the bodies and config each router is given, who answered from a response, what the
router's listings say, and the admin key scrubbed out of anything bound for results, errors and
logs. No I/O. Shapes were taken from real exchanges recorded in tests/fixtures/router/.
"""

import json

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.counters import parse_exposition
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MetricsFormatError, RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import SECRET
from ansible_collections.seatwright.fleet.plugins.module_utils.router import kinds
from ansible_collections.seatwright.fleet.plugins.module_utils.router.kinds import litellm

# The kinds seatwright ships and their pinned releases, read from their descriptions (router/kinds/).
KINDS = kinds.names()
PINNED = {name: kinds.get(name)["pinned"] for name in KINDS}
LITELLM_KEY_ENV = litellm.KEY_ENV
# LiteLLM names the deployment that answered (its model_info.id, seatwright's seat name) and its base.
LITELLM_SEAT_HEADER = "x-litellm-model-id"
LITELLM_BASE_HEADER = "x-litellm-model-api-base"
# Weights are whole shares out of this total.
WEIGHT_TOTAL = 100
# The engine's gauge that says a drained seat has finished its in-flight requests (vLLM; SGLang's name second).
RUNNING_GAUGES = ("vllm:num_requests_running", "sglang:num_running_reqs")


# The seats' API key, in the router's 0600 environment file beside its admin key; LiteLLM reads it
# from there for every call to a seat (`os.environ/` in its config).
SEAT_KEY_ENV = "SEATWRIGHT_SEAT_API_KEY"
# model_info's key naming a deployment's group, which tells its rows from an alias's copies of them.
GROUP_INFO = "seatwright_group"


def check_kind(kind):
    """`kind` itself when a description names it (router/kinds/); else the RouterError saying so."""
    kinds.get(kind)
    return kind


def check_version(kind, version):
    """Refuse a compromised release by name; the pinned one is what the recordings prove."""
    described = kinds.get(kind)
    if version in described["compromised"]:
        raise RouterError(
            "%s %s is a compromised release (PyPI, March 2026): install %s %s"
            % (kind, version, kind, described["pinned"])
        )
    return version


def declared_alias(aliases, alias, name="alias"):
    """`alias` itself when the inventory's router.aliases declares it; else the RouterError saying so."""
    if alias not in (aliases or {}):
        raise RouterError(
            "%s %r is not in the inventory's router.aliases (%s): declare it there first"
            % (name, alias, ", ".join(sorted(aliases or {})) or "none")
        )
    return alias


def seat_aliases(router, seat, asked=None):
    """The alias names seat `seat` must serve ahead of its own, from the inventory's `router`.

    smg routes a request by the first name each worker serves (checked with fake seats serving two
    names: a request for the second one is 404 model_not_found), so a seat stands behind an smg
    alias only by serving that name first: the alias the inventory declares for it (router.aliases)
    or the one it is launched to take over (`asked`, -e seat_alias). LiteLLM maps aliases itself
    and sends each seat its own name, so there it is none. A seat can lead with one name only.
    """
    router = router if isinstance(router, dict) else {}
    aliases = router.get("aliases") or {}
    if not isinstance(aliases, dict):
        raise RouterError("the inventory's router.aliases must map each alias to a seat, like {production: lab}")
    if asked not in (None, ""):
        declared_alias(aliases, asked, "seat_alias")
    described = kinds.find(router.get("kind"))
    if not (described and described["routes_by_first_served_name"]):
        return []
    names = sorted(set([alias for alias, target in aliases.items() if target == seat] + ([asked] if asked else [])))
    if len(names) > 1:
        raise RouterError(
            "seat %s would stand behind aliases %s, but smg routes by a seat's first served name, so a seat "
            "serves one alias there: give each alias its own seat" % (seat, ", ".join(names))
        )
    return names


def canary_weights(incumbent, candidate, share):
    """{seat: weight} for one step: `share` percent (0-100) to the candidate, the rest to the incumbent.
    A seat with weight 0 is left out: routers treat 0 as "default", not "none"."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= WEIGHT_TOTAL:
        raise RouterError("canary share %r is not a percentage: give a number from 0 to 100" % (share,))
    if incumbent == candidate:
        raise RouterError("incumbent and candidate are both %r: name two different seats" % incumbent)
    share = int(round(share))
    weights = {incumbent: WEIGHT_TOTAL - share, candidate: share}
    return {seat: weight for seat, weight in weights.items() if weight > 0}


def litellm_deployment(group, seat, api_base, weight=1, model=None):
    """One LiteLLM deployment (a model_list entry, and the body of /model/new): the seat is its id,
    `model` the name the seat serves (default: the group's), and the seats' key comes from LiteLLM's
    environment (SEAT_KEY_ENV), never from its config."""
    if not isinstance(weight, int) or weight < 1:
        raise RouterError("weight %r for seat %s is not a whole number of at least 1" % (weight, seat))
    params = {"model": "openai/" + (model or group), "api_base": api_base, "api_key": "os.environ/" + SEAT_KEY_ENV}
    return {
        "model_name": group,
        "litellm_params": dict(params, weight=weight),
        # The group again: an alias's own rows in /v1/model/info carry the same params and id.
        "model_info": {"id": seat, GROUP_INFO: group},
    }


def litellm_config(aliases, targets, seats, models=None):
    """A whole LiteLLM proxy config: aliases {alias: group}, targets {group: {seat: weight}},
    seats {seat: api_base}, models {seat: served model name} (default the group's). The master key
    and the seats' key stay in the environment (LITELLM_MASTER_KEY, SEAT_KEY_ENV)."""
    models = models or {}
    model_list = []
    for group in sorted(targets):
        for seat, weight in sorted(targets[group].items()):
            if seat not in seats:
                raise RouterError("seat %s has no address: register it before giving it weight" % seat)
            model_list.append(litellm_deployment(group, seat, seats[seat], weight, models.get(seat)))
    for alias, group in sorted(aliases.items()):
        if group not in targets:
            raise RouterError("alias %s points at %s, which has no seats: set its targets first" % (alias, group))
    return {
        "model_list": model_list,
        "router_settings": {"routing_strategy": "simple-shuffle", "model_group_alias": dict(sorted(aliases.items()))},
        "general_settings": {"master_key": "os.environ/" + LITELLM_KEY_ENV},
        "litellm_settings": dict(litellm.CONFIG_SETTINGS),
    }


def header(headers, name):
    """A response header's value by name, any case; headers as a dict or a list of pairs."""
    pairs = headers.items() if isinstance(headers, dict) else headers
    for key, value in pairs:
        if key.lower() == name:
            return value
    return None


def litellm_who_answered(headers):
    """{"seat", "api_base"} from LiteLLM's response headers; seat None when the proxy did not say."""
    return {"seat": header(headers, LITELLM_SEAT_HEADER), "api_base": header(headers, LITELLM_BASE_HEADER)}


def smg_who_answered(workers, counts_before, counts_after):
    """smg names no answering worker in its response (recorded: no header, the body is the engine's).
    Who answered is the one worker whose finished-request count moved; counts {url: n} before and after."""
    moved = [url for url in sorted(counts_after) if counts_after[url] > counts_before.get(url, 0)]
    by_url = {worker["url"]: worker for worker in workers}
    if len(moved) != 1:
        return {"seat": None, "api_base": None}
    return {"seat": by_url.get(moved[0], {}).get("id"), "api_base": moved[0]}


def _json(text, what):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        raise RouterError("%s is not JSON (starts %r): is the address a router's?" % (what, str(text)[:80]))


def litellm_deployments(text):
    """LiteLLM's /v1/model/info as [{"group", "seat", "api_base", "weight"}]; alias rows are left out."""
    data = _json(text, "LiteLLM's /v1/model/info")
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise RouterError("LiteLLM's /v1/model/info has no data list: is this LiteLLM %s?" % PINNED["litellm"])
    found = []
    for row in rows:
        params, info = row.get("litellm_params") or {}, row.get("model_info") or {}
        # An alias is listed as its own row with the group's deployment; the group's row is the one.
        group = info.get(GROUP_INFO) or params.get("model", "")[len("openai/") :]
        if row.get("model_name") != group:
            continue
        model = params.get("model", "")[len("openai/") :]
        found.append(
            dict(
                {
                    "group": row.get("model_name"),
                    "seat": info.get("id"),
                    "api_base": params.get("api_base"),
                    "weight": params.get("weight", 1),
                },
                **({"model": model} if model and model != group else {}),
            )
        )
    return found


def smg_workers(text):
    """smg's GET /workers as [{"id", "url", "model", "status", "healthy", "load"}]."""
    data = _json(text, "smg's /workers")
    rows = data.get("workers") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise RouterError("smg's /workers has no workers list: is this smg %s?" % PINNED["smg"])
    return [
        {
            "id": row.get("id"),
            "url": row.get("url"),
            "model": row.get("model_id"),
            "status": row.get("status"),
            "healthy": bool(row.get("is_healthy")),
            "load": row.get("load", 0),
        }
        for row in rows
    ]


def smg_worker_for(workers, url):
    """The worker registered at a seat's URL, or None."""
    url = url.rstrip("/")
    matches = [worker for worker in workers if (worker["url"] or "").rstrip("/") == url]
    return matches[0] if matches else None


def smg_alias_targets(workers, alias):
    """smg routes by each worker's served model name: an alias's seats are the workers serving it."""
    return sorted(worker["url"] for worker in workers if worker["model"] == alias and worker["status"] != "draining")


def refused(kind, call, status, text):
    """The RouterError for an answer that is not a success, with what to do where it is known."""
    described = kinds.find(kind)
    hint = described["refusal_hint"](call, status, text) if described else None
    if hint:
        return RouterError(hint)
    if status == 401:
        return RouterError("%s refused %s (HTTP 401): give the router's admin key" % (kind, call))
    return RouterError("%s refused %s (HTTP %s): %s" % (kind, call, status, str(text)[:300]))


def running_requests(metrics_text):
    """The engine's running-requests gauge summed over its series, or None when the page has none."""
    try:
        samples = parse_exposition(metrics_text or "")
    except MetricsFormatError as exc:
        raise RouterError("the seat's /metrics cannot be read while draining: %s" % exc)
    for name in RUNNING_GAUGES:
        if name in samples:
            return sum(value for _labels, value in samples[name])
    return None


def scrub(value, key):
    """A copy of value with the admin key replaced by <redacted> wherever it appears (strings, keys,
    lists, dicts, inside longer text); results, errors and logs pass through this."""
    if not key:
        return value
    if isinstance(value, str):
        return value.replace(key, SECRET)
    if isinstance(value, dict):
        return {scrub(k, key): scrub(v, key) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(item, key) for item in value]
    return value
