"""The README's first command: the offline demo answers one question of each routing case and
leaves nothing behind in the temporary directory."""

from __future__ import annotations

import tempfile

from llama_index_vmem import demo


def test_the_demo_routes_one_question_of_each_case_and_cleans_up(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    demo.main([])
    out = capsys.readouterr().out
    for case in ("text->text", "text->image", "image+text->text", "image+text->image"):
        assert f"route:   {case} " in out
    assert "memory holds 10 rounds" in out
    assert list(tmp_path.iterdir()) == []
