"""`python -m tagalign.cli.main` runs the CLI (used by benchmarks that spawn a server)."""

from tagalign.cli import main

if __name__ == "__main__":
    main()
