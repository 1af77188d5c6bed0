"""The stored study: its schema as code (statuses, trial attributes, study metadata, the trial
record and its feasibility), where studies live (storages, `study=` locations), and the one
writer and reader that the sweep, the analysis commands, the benchmarks and the tests share.
"""

from archsearch.study.reader import StudyData, load, records
from archsearch.study.schema import DamagedAttribute, Status, StudyMeta, TrialRecord
from archsearch.study.storage import (
    check_storage_reachable,
    check_study_storage,
    default_storage_url,
    locate,
    open_reader,
    open_storage,
    redact,
    study_names,
)
from archsearch.study.writer import StudyWriter

__all__ = [
    "DamagedAttribute",
    "Status",
    "StudyData",
    "StudyMeta",
    "StudyWriter",
    "TrialRecord",
    "check_storage_reachable",
    "check_study_storage",
    "default_storage_url",
    "load",
    "locate",
    "open_reader",
    "open_storage",
    "records",
    "redact",
    "study_names",
]
