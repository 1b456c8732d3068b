"""``make notebooks``: a thin entry point for ``python -m course_lib.authoring.run_notebooks`` (see there)."""
import sys

from course_lib.authoring.run_notebooks import main

if __name__ == "__main__":
    sys.exit(main())
