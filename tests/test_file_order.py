"""The parallel suite's order (tests/file_order.py): longest files first, each file's tests in their own order."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.file_order import NEW_FILE_SECONDS_PER_TEST, known_durations, longest_first

IDS = ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t1", "tests/c.py::t1", "tests/c.py::t2", "tests/c.py::t3"]


def test_the_longest_file_goes_first_and_each_file_keeps_its_tests_in_order() -> None:
    order = [IDS[i] for i in longest_first(IDS, {"tests/a.py": 5.0, "tests/b.py": 200.0, "tests/c.py": 1.0})]
    assert order == ["tests/b.py::t1", "tests/a.py::t1", "tests/a.py::t2", "tests/c.py::t1", "tests/c.py::t2",
                     "tests/c.py::t3"]


def test_a_file_without_a_figure_counts_its_tests() -> None:
    # c.py has three tests and no figure: 3 s; a.py measured 2.5 s; b.py unknown with one test: 1 s
    order = [IDS[i] for i in longest_first(IDS, {"tests/a.py": 2.5})]
    assert NEW_FILE_SECONDS_PER_TEST == 1.0
    assert order == ["tests/c.py::t1", "tests/c.py::t2", "tests/c.py::t3", "tests/a.py::t1", "tests/a.py::t2",
                     "tests/b.py::t1"]
    assert longest_first(IDS, {}) == [3, 4, 5, 0, 1, 2]  # ties (a and c would be 2 vs 3) by count, then collection


@given(st.sets(st.sampled_from(IDS)).map(lambda chosen: [i for i in IDS if i in chosen]),  # collected: files together
       st.dictionaries(st.sampled_from(["tests/a.py", "tests/b.py", "tests/c.py"]),
                       st.floats(min_value=0, max_value=1e6, allow_nan=False)))
def test_the_order_is_a_permutation_that_keeps_files_together(ids: list[str], durations: dict[str, float]) -> None:
    order = longest_first(ids, durations)
    assert sorted(order) == list(range(len(ids)))
    files = [ids[i].split("::")[0] for i in order]
    for f in set(files):
        where = [n for n, name in enumerate(files) if name == f]
        assert where == list(range(where[0], where[0] + len(where)))  # together
    for f in set(files):
        mine = [ids[i] for i in order if ids[i].startswith(f + "::")]
        assert mine == [i for i in ids if i.startswith(f + "::")]


def test_a_broken_figures_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    assert known_durations(path) == {}  # missing
    for text in ["", "[1, 2]", "{", "null", '"x"']:
        path.write_text(text)
        assert known_durations(path) == {}, text
    path.write_text(json.dumps({"tests/a.py": 3, "tests/b.py": "slow", "tests/c.py": True, "tests/d.py": 1.5}))
    assert known_durations(path) == {"tests/a.py": 3.0, "tests/d.py": 1.5}
