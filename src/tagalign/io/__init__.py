"""Input and output shared by every layer, one concern per module:

- `atomic`: atomic, fsynced, pickle-free writers of files and folders (JSON, npy, CSR)
  and their readers; a full disk while writing is a `NoSpaceError` naming the path;
- `lines`: user input decoded line by line (`LineReader`, `parse_lines`, `LineError`);
- `iso2709`: binary MARC's framing, records cut at end-of-record marks and their leader
  and directory checked (both MARC readers);
- `report`: `InputReport`, what the loaders skipped (logged, never printed);
- `kinds`: which kind of saved model a folder holds (each package registers its own)
  and the package versions an artifact records.
"""

from tagalign.io.atomic import (
    atomic_dir,
    atomic_path,
    atomic_text,
    fsync_dir,
    load_csr,
    load_npy,
    no_space_error,
    probe_space,
    read_json,
    read_json_input,
    save_csr_atomic,
    save_npy_atomic,
    write_bytes_atomic,
    write_json_atomic,
)
from tagalign.io.kinds import (
    MODEL_KINDS,
    ModelKind,
    json_object,
    model_kind,
    register_kind,
    versions,
    wrong_model_message,
)
from tagalign.io.lines import (
    MAX_LINE_BYTES,
    PARSE_ERRORS,
    LineError,
    LineReader,
    Reporter,
    decode_utf8,
    describe_error,
    open_binary,
    open_text,
    parse_lines,
    read_text_lenient,
)
from tagalign.io.report import BadInputError, InputReport

__all__ = [
    "MAX_LINE_BYTES", "MODEL_KINDS", "PARSE_ERRORS", "BadInputError", "InputReport",
    "LineError", "LineReader", "ModelKind", "Reporter", "atomic_dir", "atomic_path",
    "atomic_text", "decode_utf8", "describe_error", "fsync_dir", "json_object", "load_csr",
    "load_npy", "model_kind", "no_space_error", "open_binary", "open_text", "parse_lines",
    "probe_space", "read_json", "read_json_input", "read_text_lenient", "register_kind",
    "save_csr_atomic", "save_npy_atomic", "versions",
    "wrong_model_message", "write_bytes_atomic", "write_json_atomic",
]
