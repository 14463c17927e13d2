"""`python -m tagalign.cli.main` runs the CLI (used by benchmarks that spawn a server)."""

from tagalign.cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
