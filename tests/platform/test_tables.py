"""hir.tables: the one Markdown table renderer."""

from __future__ import annotations

import numpy as np
from hir.tables import markdown_table


def test_plain_rows_render_as_a_table():
    assert markdown_table(["type", "rows"], [("user", 3), ("ad", 12)]) == (
        "| type | rows |\n"
        "|---|---|\n"
        "| user | 3 |\n"
        "| ad | 12 |"
    )


def test_formats_apply_to_the_numbers_of_their_column():
    rows = [("hir", 0.123456, 1234567, 0.0512), ("pop", np.float32(0.5), np.int64(1000), "+5.12% (gain)")]
    got = markdown_table(["scorer", "recall", "rows", "lift"], rows, {"recall": ".4f", "rows": ",", "lift": "+.2%"})
    assert got == (
        "| scorer | recall | rows | lift |\n"
        "|---|---|---|---|\n"
        "| hir | 0.1235 | 1,234,567 | +5.12% |\n"
        "| pop | 0.5000 | 1,000 | +5.12% (gain) |"
    )


def test_none_reads_a_dash_and_unformatted_numbers_stay_as_they_are():
    assert markdown_table(["a", "b", "c"], [(None, 0.5, None)], {"c": ".2f"}) == "| a | b | c |\n|---|---|---|\n| - | 0.5 | - |"


def test_pipes_are_escaped_and_line_breaks_become_spaces():
    assert markdown_table(["text"], [("Toy Story | Comedy\nAnimation",)]) == (
        "| text |\n|---|\n| Toy Story \\| Comedy Animation |"
    )


def test_an_empty_table_is_its_header_or_the_given_text():
    assert markdown_table(["reason", "rows"], []) == "| reason | rows |\n|---|---|"
    assert markdown_table(["reason", "rows"], iter(()), empty="no rejected rows") == "no rejected rows"
