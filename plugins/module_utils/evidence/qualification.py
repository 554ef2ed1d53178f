"""qualification.md of one qualification, from its redacted record (pure: data in, text out)."""

from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.verdict import verdict_table


def qualification_markdown(record):
    """The verdict table a person reads, headed by what was qualified, where and when."""
    lines = [
        "# Qualification of %s" % record["seat"],
        "",
        "%s against `%s` (model `%s`), %s to %s."
        % (record["recipe"], record["base_url"], record["model"], record["started_at"], record["finished_at"]),
        "",
    ]
    return "\n".join(lines + verdict_table(record)) + "\n"
