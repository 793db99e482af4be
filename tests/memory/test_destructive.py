"""The rule that holds a reflection for the user, on real repos: what counts as deleting or
emptying core memory, how lines are counted, and the floor under the share."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shared.memory.destructive import judge
from shared.memory.repo import MemoryRepo

HUMAN = "- Name: Ada.\n- Prefers tabs.\n- Deploys with pnpm."


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    MemoryRepo.create(tmp_path / "m", agent_id="a1", agent_name="Ada", persona="p", human=HUMAN)
    return tmp_path / "m"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _change(repo: Path, script: str) -> tuple[str, str]:
    """Run ``script`` in the checkout, commit everything; (base, head)."""
    base = _git(repo, "rev-parse", "HEAD").strip()
    subprocess.run(["sh", "-c", script], cwd=repo, check=True)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "change", "--allow-empty")
    return base, _git(repo, "rev-parse", "HEAD").strip()


def test_a_core_file_replaced_by_a_link_or_moved_out_of_system_counts_as_deleted(
    repo: Path,
) -> None:
    base, head = _change(
        repo, "ln -sf /etc/hostname system/human.md && git mv system/persona.md persona.md"
    )
    found = judge(repo, base, head, 0.3)
    assert found is not None
    assert found.deleted == ["system/human.md", "system/persona.md"]
    assert found.reason == "system_file_deleted"


def test_emptied_is_judged_as_the_prompt_shows_the_body(repo: Path) -> None:
    only_frontmatter = (
        "printf -- '---\\nname: human\\ndescription: x\\n---\\n\\n \\n' > system/human.md"
    )
    start = _git(repo, "rev-parse", "HEAD").strip()
    base, head = _change(repo, only_frontmatter)
    emptied = judge(repo, base, head, 0.3)
    assert emptied is not None and emptied.emptied == ["system/human.md"]
    assert emptied.describe().startswith("it empties system/human.md")

    _git(repo, "reset", "-q", "--hard", start)
    base, head = _change(repo, "printf -- '---\\nname: [broken\\n---\\n' > system/human.md")
    assert base == start
    assert judge(repo, base, head, 0.3) is None, "unreadable frontmatter: the text is shown"


def test_a_core_file_that_was_empty_already_is_not_emptied_by_a_change(tmp_path: Path) -> None:
    MemoryRepo.create(tmp_path / "m", agent_id="a1", agent_name="Ada", persona="p", human="")
    repo = tmp_path / "m"
    base, head = _change(
        repo, "printf -- '---\\nname: human\\ndescription: y\\n---\\n' > system/human.md"
    )
    assert judge(repo, base, head, 0.3) is None


def _notes(lines: int, prefix: str = "fact") -> str:
    facts = "".join(f"- {prefix} {n}\\n" for n in range(lines))
    return f"mkdir -p notes && printf -- '{facts}' > notes/facts.md"


def test_lines_removed_are_counted_over_every_file_and_a_binary_counts_none(repo: Path) -> None:
    _change(repo, _notes(40) + " && printf 'x\\000y\\nz\\n' > b.bin")
    base, head = _change(
        repo, "head -n 10 notes/facts.md > ../k && mv ../k notes/facts.md && rm b.bin"
    )

    found = judge(repo, base, head, 0.3)

    assert found is not None and found.reason == "lines_removed"
    assert (found.removed, found.added, found.net_removed) == (30, 0, 30)
    assert found.lines_before == 5 + 7 + 40  # persona, human, facts
    assert found.diffstat() == "2 files changed, 0 insertions(+), 30 deletions(-)"
    assert "removes 30 of memory's 52 lines (net), more than 30%" in found.describe()


@pytest.mark.parametrize(("share", "held"), [(0.3, False), (0.25, True)])
def test_what_a_change_adds_back_counts_against_what_it_removes(
    repo: Path, share: float, held: bool
) -> None:
    _change(repo, _notes(40))
    base, head = _change(repo, _notes(25, prefix="merged fact"))  # -40 +25: net 15 of 52

    found = judge(repo, base, head, share)

    assert (found is not None) == held


@pytest.mark.parametrize(("lines", "held"), [(10, False), (11, True)])
def test_the_floor_keeps_a_small_memory_from_being_held_for_a_tidy_up(
    repo: Path, lines: int, held: bool
) -> None:
    _change(repo, _notes(lines))
    base, head = _change(repo, "git rm -q notes/facts.md")

    found = judge(repo, base, head, 0.01)

    assert (found is not None) == held
