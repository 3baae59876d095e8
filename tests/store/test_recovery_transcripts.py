"""Store-recovery transcripts: every ``testdata/*.txt`` replayed against the file store (see
``recovery_transcript.py``). Each file shows one rule of ``dledger.store.recovery``.

``pytest tests/store/test_recovery_transcripts.py --update-goldens`` rewrites the files with
what recovery does now; review the diff before committing it.
"""

from pathlib import Path

import pytest

from helpers.transcripts import TranscriptError, check_golden
from recovery_transcript import run_file, run_text  # tests/store is on the path (no __init__.py)

TESTDATA = Path(__file__).parent / "testdata"
FILES = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_transcript(path, request):
    failure = check_golden(path, run_file(path), request.config.getoption("--update-goldens"))
    if failure:
        pytest.fail(failure, pytrace=False)


def test_every_transcript_names_the_rule_it_shows():
    assert len(FILES) >= 8
    for path in FILES:
        first = path.read_text().split("\n", 1)[0]
        assert first.startswith("# Rule "), f"{path.name} starts with {first!r}"


# -- the driver itself -------------------------------------------------------------------------
def test_unchanged_output_round_trips_byte_for_byte():
    text = ("# Rule 3: a comment\nopen durability=fsync\n----\n"
            "opened a new store (fsync, data segments of 1024 bytes, index segments of 2048): "
            "FRESH cleared, term 1\n"
            "begin=0 end=-1 before_begin_term=-1 end_term=-1 committed=-1 term=1 suspect=-\n\n"
            "append 2\n----\nappended term=1: 0@0 1@64\n")
    assert run_text(text) == text


@pytest.mark.parametrize("text,message", [
    ("log\n----\n", "start with an 'open'"),
    ("open\n----\n\nfrobnicate\n----\n", "unknown command 'frobnicate'"),
    ("open\n----\n\nappend x\n----\n", "N must be an integer, got 'x'"),
    ("open\n----\n\nappend 1 colour=red\n----\n", "unknown options \\['colour'\\]"),
    ("open\n----\n\nflip data/0 3\n----\n", "the store is open"),
    ("open\n----\n\ncrash\n----\n\nflip data/7 3\n----\n", "no data segment '7'"),
    ("open\n----\n\ncrash\n----\n\nflip record:9 term\n----\n", "index unit 9 is not on disk"),
    ("open\n----\n\nappend 1\n----\n\ncrash\n----\n\nflip record:9 term\n----\n",
     "index unit 9 on disk names entry 0"),
    ("open\n----\n\ncrash\n----\n\nflip notes.txt 0\n----\n", "unknown file 'notes.txt'"),
    ("open\n----\n\nappend 1\n----\n\ncrash\n----\n\ntear 0 bytes=64\n----\n", "within the record's 64 bytes"),
    ("open\n----\n\nappend 1\n----\n\ncrash\n----\n\nwrite data/0 0 0x01\n----\n", "not hex: '0x01'"),
    ("open\n----\n\nappend 1\n----\n\ncrash\n----\n\nwrite data/0 1023 0102\n----\n",
     "2 bytes at offset 1023 go beyond data/00000000000000000000"),
    ("open\n----\n\nclose\n----\n\nlog\n----\n", "the store is not open"),
    ("open\n----\n\nopen\n----\n", "use reopen"),
    ("open durability=sometimes\n----\n", "durability must be one of"),
    ("open\nlog\n", "followed by a line '----'"),
])
def test_bad_transcripts_name_the_line(text, message):
    with pytest.raises(TranscriptError, match=message):
        run_text(text, "t.txt")
