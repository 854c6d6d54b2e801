"""`python -m headrace.examples.sessions_billing [flags]`: runs the job (`cli.main`)."""

import sys

from headrace.examples.sessions_billing.cli import main

if __name__ == "__main__":
    sys.exit(main())
