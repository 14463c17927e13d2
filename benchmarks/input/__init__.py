"""Reading records and vocabularies: JSONL per line, MARC 21, the GND formats."""
