"""GND (or any SKOS) subject vocabulary: data classes, loaders, fast saved form."""

from tagalign.vocab.loaders import VOCAB_FORMATS, UnknownFormatError, load_vocabulary
from tagalign.vocab.subject import GND_URI, Subject, normalize_subject_id
from tagalign.vocab.vocabulary import Vocabulary, VocabularyMismatchError

__all__ = [
    "GND_URI",
    "VOCAB_FORMATS",
    "Subject",
    "UnknownFormatError",
    "Vocabulary",
    "VocabularyMismatchError",
    "load_vocabulary",
    "normalize_subject_id",
]
