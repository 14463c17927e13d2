"""Batch tagging and encoding of large record sets: sharded, resumable, nothing dropped.

``run_batch(spec, src, out, engine)`` cuts the input into shards (`sources`), runs each
through a task (`tasks`: suggest or encode) on an engine (`engines`: local or Ray Data)
and keeps ``OUT/manifest.json`` so that a rerun does only what is missing. Ray is imported
only when the ``ray`` engine runs.
"""

from tagalign.batch.engines import ENGINES, EngineError, get_engine
from tagalign.batch.inputs import INPUTS, Shard, plan_shards
from tagalign.batch.run import DEFAULT_MAX_ERRORS, MANIFEST, BatchError, BatchResult, run_batch
from tagalign.batch.tasks import TASKS

__all__ = ["DEFAULT_MAX_ERRORS", "ENGINES", "MANIFEST", "INPUTS", "TASKS", "BatchError",
           "BatchResult", "EngineError", "Shard", "get_engine", "plan_shards", "run_batch"]
