"""The shared parsers in picobot.domain: one cron grammar, one frontmatter reader."""

from __future__ import annotations

import pytest

from picobot.config.schema import check_cron
from picobot.domain import cron, frontmatter
from picobot.scheduler import schedules


def test_config_and_scheduler_share_one_cron_grammar() -> None:
    assert check_cron is cron.check_cron and schedules.parse_cron is cron.parse_cron
    assert check_cron(" 30  18 * * mon-fri ") == "30 18 * * mon-fri"
    for bad in ["5-1 * * * *", "٣ * * * *", "* * * *", "*/0 * * * *"]:
        with pytest.raises(ValueError):
            check_cron(bad)  # what the scheduler cannot run, the config does not accept either


def test_frontmatter_split_and_its_errors() -> None:
    assert frontmatter.split("\ufeff---\na: 1\n---\n\nbody") == ({"a": 1}, "body")
    with pytest.raises(frontmatter.FrontmatterError) as e:
        frontmatter.split("---\na: [\n---\n")
    assert e.value.reason == "its frontmatter is not valid YAML" and str(e.value).endswith("(line 3)")
    with pytest.raises(frontmatter.FrontmatterError, match="over 4 characters"):
        frontmatter.split("---\nabcdef: 1\n---\n", max_chars=4)
    with pytest.raises(frontmatter.FrontmatterError, match="block holding x$"):
        frontmatter.split("# no block", opening_hint=" holding x")
