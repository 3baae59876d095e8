"""Transcript tests: every ``testdata/*.txt`` replayed against the core (see ``transcript.py``).

``pytest tests/core/test_transcripts.py --update-goldens`` rewrites the files with what the
core does now; review the diff before committing it.
"""

from pathlib import Path

import pytest

from core.transcript import TranscriptError, run_file, run_text
from helpers.transcripts import check_golden

TESTDATA = Path(__file__).parent / "testdata"
FILES = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_transcript(path, request):
    failure = check_golden(path, run_file(path), request.config.getoption("--update-goldens"))
    if failure:
        pytest.fail(failure, pytrace=False)


def test_there_are_transcripts():
    assert len(FILES) >= 6


# -- the interpreter itself --------------------------------------------------------------------
def test_unchanged_output_round_trips_byte_for_byte():
    text = "# a comment\ncluster n=1 seed=3\n----\nn0 becomes CANDIDATE term=0 (start)\n\n# end\n"
    assert run_text(text) == text


def test_wrong_expected_output_is_replaced_by_the_actual_one():
    text = "cluster n=1\n----\nsomething else\n\nstatus\n----\n"
    out = run_text(text)
    assert "something else" not in out and "n0 becomes CANDIDATE term=0 (start)" in out
    assert out.endswith("status\n----\nt=0\nn0 CANDIDATE term=0 vote=- leader=- end=(-1,-1) commit=-1 applied=-1\n")


@pytest.mark.parametrize("text,message", [
    ("status\n----\n", "start with a 'cluster'"),
    ("cluster n=3\n----\n\nfrobnicate\n----\n", "unknown command"),
    ("cluster n=3\n----\n\npropose n7 x\n----\n", "no node 'n7'"),
    ("cluster n=3\n----\n\nadvance\n----\n", "needs ms=N"),
    ("cluster n=3\n----\n\ncrash n1\n----\n\npropose n1 x\n----\n", "n1 is down"),
    ("cluster n=3\nstatus\n", "followed by a line '----'"),
])
def test_bad_transcripts_name_the_line(text, message):
    with pytest.raises(TranscriptError, match=message):
        run_text(text, "t.txt")
