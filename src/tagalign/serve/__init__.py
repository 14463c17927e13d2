"""`tagalign serve`: REST API, web page and feedback store."""

#: Largest request body (Annif's default, its ANNIF_MAX_CONTENT_LENGTH); here for the CLI
#: to read without importing the web framework
MAX_BODY = 20_000_000
MAX_BODY_ENV = "TAGALIGN_MAX_CONTENT_LENGTH"
