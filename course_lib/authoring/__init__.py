"""Tools for authors and teachers: exercise generation, grading, executing notebooks.

Nothing here is imported by a lesson or an exercise.
"""
