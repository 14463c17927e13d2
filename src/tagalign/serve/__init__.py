"""`tagalign serve`: REST API and web page (the feedback store they write to:
`tagalign.feedback`)."""

#: Largest request body (Annif's default, its ANNIF_MAX_CONTENT_LENGTH); here for the CLI
#: to read without importing the web framework
MAX_BODY = 20_000_000
MAX_BODY_ENV = "TAGALIGN_MAX_CONTENT_LENGTH"
#: where tagalign's own API lives (each of its routers' prefix); Annif's is at /v1
#: (`tagalign.serve.annif.PREFIX`)
API = "/tagalign/v1"
