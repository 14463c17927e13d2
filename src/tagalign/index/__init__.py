"""Vector search over subject (or record) embeddings."""

from tagalign.index.faiss_index import LazyRows, VectorIndex

__all__ = ["LazyRows", "VectorIndex"]
