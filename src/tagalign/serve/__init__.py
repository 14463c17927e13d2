"""`tagalign serve`: REST API, web page and feedback store."""
