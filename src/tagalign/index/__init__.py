"""Vector search over subject (or record) embeddings."""

from tagalign.index.faiss_index import VectorIndex

__all__ = ["VectorIndex"]
