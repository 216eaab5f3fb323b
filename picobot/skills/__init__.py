"""Skills: folders holding a SKILL.md of instructions the agent activates for a kind of task.

    paths.py        the six source folders and the two writable scopes
    frontmatter.py  parsing and writing SKILL.md
    catalog.py      discovery, precedence, change detection, the index text (index.py)
    state.py        skill-state.json (disabled names), user and project
    manage.py       create / update / delete / disable / enable
    builtin/        skills shipped with PicoBot, released to $PICOBOT_HOME/skills/
    events.py       the skill_events audit rows

A skill is untrusted text: nothing here grants a tool or a permission.
"""

from __future__ import annotations

from picobot.skills.catalog import Skill, SkillCatalog
from picobot.skills.paths import SkillPaths

__all__ = ["Skill", "SkillCatalog", "SkillPaths"]
