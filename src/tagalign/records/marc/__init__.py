"""MARC 21 bibliographic records: binary (ISO 2709) and MARC-XML, read as a stream
(`reader`: the ``marc`` record format), mapped to `Record`s (`fields`), written (`writer`)."""
