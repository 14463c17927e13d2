"""Bibliographic records: data class, streaming loaders, bad-input reporting."""

from tagalign.io import BadInputError, InputReport
from tagalign.records.loaders import RECORD_FORMATS, read_records
from tagalign.records.record import EMPTY_WARNING, MAX_TEXT_CHARS, Checked, Record, check_record

__all__ = ["EMPTY_WARNING", "MAX_TEXT_CHARS", "RECORD_FORMATS", "BadInputError", "Checked",
           "InputReport", "Record", "check_record", "read_records"]
