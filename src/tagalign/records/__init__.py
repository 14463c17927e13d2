"""Bibliographic records: data class, streaming loaders, bad-input reporting."""

from tagalign.records.loaders import RECORD_FORMATS, read_records
from tagalign.records.record import Record
from tagalign.records.report import BadInputError, InputReport

__all__ = ["RECORD_FORMATS", "BadInputError", "InputReport", "Record", "read_records"]
