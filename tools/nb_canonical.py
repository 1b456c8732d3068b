"""A thin entry point for ``python -m course_lib.authoring.nb_canonical`` (see there)."""
import sys

from course_lib.authoring.nb_canonical import main

if __name__ == "__main__":
    sys.exit(main())
