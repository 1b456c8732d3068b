"""Tools for authors and teachers: exercise generation, grading, executing notebooks.

* :mod:`~course_lib.authoring.kernel`: the one definition of the kernel that executes notebooks
  (interpreter, environment, timeouts), shared by the three tools below and by nbval in ``make test``;
* :mod:`~course_lib.authoring.run_notebooks` (``make notebooks``) and
  :mod:`~course_lib.authoring.nb_canonical` (the stored form of a notebook);
* :mod:`~course_lib.authoring.grade` (``python -m course_lib.authoring.grade``);
* :mod:`~course_lib.authoring.exgen` (``make exercises``).

Nothing here is imported by a lesson or an exercise.
"""
